"""/v1/embeddings and /v1/rerank in process: request bodies checked and refused
naming the parameter, answers in OpenAI's (and the rerank APIs') shape, and
EmbeddingServer over the real all-MiniLM-L6-v2 (what it refuses, what it
truncates, texts and token ids alike). Through real processes and the openai
client: tests/test_llm_openai.py."""

from __future__ import annotations

import base64
import pickle

import numpy as np
import pytest

from servefleet._private.embeddings import protocol
from servefleet._private.embeddings.protocol import BadInput
from servefleet._private.embeddings.server import EmbeddingServer
from servefleet._private.llm.openai_protocol import APIError
from servefleet.llm import EmbeddingConfig, LLMServer, build_openai_app


@pytest.fixture(scope="module")
def server() -> EmbeddingServer:
    return EmbeddingServer("minilm")


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "x"}, "model"),
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": ""}, "input"),
    ({"model": "m", "input": ["a", ""]}, "input[1]"),
    ({"model": "m", "input": ["a", 3]}, "input"),
    ({"model": "m", "input": [[1, 2], []]}, "input[1]"),
    ({"model": "m", "input": [[1, "2"]]}, "input[0]"),
    ({"model": "m", "input": ["a"] * 2049}, "input"),
    ({"model": "m", "input": "a", "encoding_format": "int8"}, "encoding_format"),
    ({"model": "m", "input": "a", "dimensions": 0}, "dimensions"),
    ({"model": "m", "input": "a", "dimensions": "384"}, "dimensions"),
    ({"model": "m", "input": "a", "user": 7}, "user"),
])
def test_a_bad_embeddings_body_is_a_400_naming_the_parameter(body, param) -> None:
    with pytest.raises(APIError) as refused:
        protocol.embeddings_request(body)
    assert refused.value.status == 400 and refused.value.param == param, refused.value.message


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "documents": ["a"]}, "query"),
    ({"model": "m", "query": "q", "documents": []}, "documents"),
    ({"model": "m", "query": "q", "documents": ["a", {"text": ""}]}, "documents[1]"),
    ({"model": "m", "query": "q", "documents": ["a"], "top_n": 0}, "top_n"),
    ({"model": "m", "query": "q", "documents": ["a"], "return_documents": "no"},
     "return_documents"),
])
def test_a_bad_rerank_body_is_a_400_naming_the_parameter(body, param) -> None:
    with pytest.raises(APIError) as refused:
        protocol.rerank_request(body)
    assert refused.value.status == 400 and refused.value.param == param, refused.value.message


def test_inputs_of_every_kind_are_read() -> None:
    read = protocol.embeddings_request
    assert read({"model": "m", "input": "a"}).inputs == ["a"]
    assert read({"model": "m", "input": ["a", "b"]}).inputs == ["a", "b"]
    assert read({"model": "m", "input": [101, 102]}).inputs == [[101, 102]]
    assert read({"model": "m", "input": [[101], [101, 102]]}).inputs == [[101], [101, 102]]
    assert read({"model": "m", "input": "a"}).encoding_format == "float"


def test_answers_have_the_apis_shape() -> None:
    vectors = np.array([[0.5, -0.25], [1.0, 0.0]], dtype=np.float32)
    wanted = protocol.embeddings_request({"model": "m", "input": ["a", "b"],
                                          "encoding_format": "base64"})
    answer = protocol.embeddings_answer(wanted, vectors, 7)
    assert answer["object"] == "list" and answer["model"] == "m"
    assert answer["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    first = answer["data"][0]
    assert first["object"] == "embedding" and first["index"] == 0
    decoded = np.frombuffer(base64.b64decode(first["embedding"]), dtype="<f4")
    assert decoded.tolist() == [0.5, -0.25]
    floats = protocol.embeddings_answer(protocol.embeddings_request(
        {"model": "m", "input": "a"}), vectors[:1], 3)
    assert floats["data"][0]["embedding"] == [0.5, -0.25]

    ask = protocol.rerank_request({"model": "m", "query": "q", "documents": [
        "a", {"text": "b"}, "c"], "top_n": 2})
    ranked = protocol.rerank_answer(ask, [0.1, 0.9, 0.9], 12)
    assert [r["index"] for r in ranked["results"]] == [1, 2]  # by score, ties by index
    assert ranked["results"][0] == {"index": 1, "relevance_score": 0.9,
                                    "document": {"text": "b"}}
    assert ranked["usage"] == {"total_tokens": 12} and ranked["id"].startswith("rerank-")
    slim = protocol.rerank_answer(protocol.rerank_request(
        {"model": "m", "query": "q", "documents": ["a"], "return_documents": False}), [0.3], 2)
    assert slim["results"] == [{"index": 0, "relevance_score": 0.3}]


def test_a_refusal_crosses_a_handle_call_as_it_is() -> None:
    again = pickle.loads(pickle.dumps(BadInput("input[2]", "too long")))
    assert isinstance(again, ValueError) and again.param == "input[2]"
    assert str(again) == "too long"


async def test_texts_and_their_token_ids_embed_alike(server: EmbeddingServer) -> None:
    texts = ["A man is playing a guitar.", "Hello"]
    by_text = await server.embed(texts)
    ids = server.model.tokenize(texts)
    by_ids = await server.embed(ids)
    np.testing.assert_allclose(by_text["vectors"], by_ids["vectors"], atol=1e-6)
    assert by_text["prompt_tokens"] == by_ids["prompt_tokens"] == sum(map(len, ids))
    assert (await server.embed(["x"], dimensions=384))["vectors"].shape == (1, 384)


async def test_what_the_model_cannot_take_is_refused_naming_it(
        server: EmbeddingServer) -> None:
    with pytest.raises(BadInput) as refused:
        await server.embed(["short", "word " * 300])
    assert refused.value.param == "input[1]"
    assert "302 tokens" in str(refused.value) and "at most 256" in str(refused.value)
    with pytest.raises(BadInput) as refused:
        await server.embed([[101, 30522, 102]])
    assert refused.value.param == "input" and "vocabulary" in str(refused.value)
    with pytest.raises(BadInput) as refused:
        await server.embed(["x"], dimensions=256)
    assert refused.value.param == "dimensions" and "384" in str(refused.value)
    with pytest.raises(BadInput) as refused:
        await server.rerank("q " * 300, ["a"])
    assert refused.value.param == "query"


async def test_a_truncating_deployment_cuts_long_inputs() -> None:
    cutting = EmbeddingServer("minilm", truncate=True)
    done = await cutting.embed(["word " * 300, "word " * 10])
    assert done["vectors"].shape == (2, 384) and done["prompt_tokens"] == 256 + 12


async def test_rerank_scores_the_relevant_document_highest(server: EmbeddingServer) -> None:
    documents = ["The Eiffel Tower is in Paris.", "Bananas are rich in potassium.",
                 "Berlin is the capital of Germany."]
    done = await server.rerank("What is the capital city of Germany?", documents)
    scores = done["scores"]
    assert len(scores) == 3 and int(np.argmax(scores)) == 2
    assert done["total_tokens"] > 20
    stats = await server.stats()
    assert stats["dimensions"] == 384 and stats["max_tokens"] == 256 and stats["inputs"] >= 4


def test_the_builder_takes_embedding_models_beside_language_models() -> None:
    app = build_openai_app({"llm_configs": [{"model_id": "kjv"}],
                            "embedding_configs": [{"model_id": "minilm", "truncate": True}]})
    assert app is not None
    assert build_openai_app([], embedding_configs=[EmbeddingConfig()]) is not None
    with pytest.raises(ValueError, match="distinct"):
        build_openai_app([{"model_id": "x"}], embedding_configs=[{"model_id": "x"}])
    with pytest.raises(ValueError, match="unknown keys"):
        build_openai_app({"embedding_configs": [{"model_id": "m", "dims": 3}]})


def test_an_llm_server_loads_its_model_before_it_is_ready() -> None:
    # A replica runs the constructor before it reports ready: the model must be
    # trained by then, not on the first request.
    server = LLMServer("genesis", engine_kwargs={"passages": "Gen1:1-Gen2:25"})
    assert server.engine is not None and server.engine._model is not None


class WordOverlap:
    """A stand-in cross-encoder: it scores a document by the query's words in it."""

    max_tokens = 8

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return [[len(w) for w in t.split()] for t in texts]

    def truncate(self, ids: list[int]) -> list[int]:
        return ids[:self.max_tokens]

    def warm(self) -> None:
        self.warmed = True

    def score(self, query: str, documents: list[str]) -> list[float]:
        words = set(query.split())
        return [len(words & set(d.split())) / len(words) for d in documents]


class Unscored(WordOverlap):
    score = None  # type: ignore[assignment]


async def test_a_model_with_score_reranks_with_it_and_may_not_embed() -> None:
    server = EmbeddingServer("overlap", model="test_embeddings_api:WordOverlap")
    assert server.model.warmed  # warmed in the constructor, before the replica is ready
    done = await server.rerank("red apple", ["green pear", "red apple pie", "red car"])
    assert done["scores"] == [0.0, 1.0, 0.5]
    assert done["total_tokens"] == 2 * 3 + 2 + 3 + 2  # the query read with each document
    with pytest.raises(BadInput) as refused:
        await server.embed(["red apple"])
    assert refused.value.param == "model" and "only scores" in str(refused.value)
    with pytest.raises(TypeError, match="lacks embed or score"):
        EmbeddingServer("x", model="test_embeddings_api:Unscored")
