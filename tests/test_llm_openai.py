"""servefleet.llm through real processes, with the official `openai` client as
users write it: a controller, a proxy, the OpenAI ingress and its models
(NGramEngine trained on Genesis, on Exodus, ...; all-MiniLM-L6-v2 for
embeddings and rerank), deployed from a config file that names
`servefleet.llm:build_openai_app` with args, as examples/llm does."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import openai
import pytest
import yaml

from servefleet import get_deployment_handle
from servefleet._private.configuration.config_file import load_config
from servefleet._private.security import tokens
from servefleet._private.testing import ControllerProcess, ProxyProcess, stop_cluster, wait_for
from servefleet.client import ControllerClient
from servefleet.llm import ChatMessage, NGramEngine

GENESIS, EXODUS = "Gen1:1-Gen50:26", "Ex1:1-Ex40:38"


@dataclass
class LLM:
    url: str  # the proxy's
    client: openai.OpenAI
    controller_address: str
    bearer: dict[str, str]  # the route requires a token: the header with it


def config(tmp) -> str:
    models = [{"model_id": "genesis", "engine_kwargs": {"passages": GENESIS},
               "deployment_config": {"num_replicas": 1, "max_ongoing_requests": 32}},
              {"model_id": "exodus", "engine_kwargs": {"passages": EXODUS}},
              # Two more in one deployment of 2 replicas, one model per replica at most.
              {"model_id": "ruth", "engine_kwargs": {"passages": "Ruth1:1-Ruth4:22"},
               "deployment_name": "Shared", "max_models_per_replica": 1,
               "deployment_config": {"num_replicas": 2}},
              {"model_id": "jonah", "engine_kwargs": {"passages": "Jonah1:1-Jonah4:11"},
               "deployment_name": "Shared"},
              # One call at a time and no queue: a second call is refused.
              {"model_id": "obadiah", "engine_kwargs": {"passages": "Obad1:1-Obad1:21"},
               "deployment_config": {"max_ongoing_requests": 1, "max_queued_requests": 0}}]
    path = tmp / "llm.yaml"
    path.write_text(yaml.safe_dump({"applications": [{
        "name": "llm", "route_prefix": "/llm", "import_path": "servefleet.llm:build_openai_app",
        "require_token": True, "args": {"llm_configs": models,
                                        # all-MiniLM-L6-v2, beside the language models
                                        "embedding_configs": [{"model_id": "minilm"}]}}]}))
    return str(path)


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LLM]:
    tmp = tmp_path_factory.mktemp("llm")
    cluster = f"llm-{os.getpid()}"
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster=cluster,
                                   runtime="process", log_dir=tmp).start()
    token = tokens.create(tmp / "http-tokens", "chat-frontend", "reader")
    proxy = ProxyProcess([controller.address], log_dir=tmp,
                         extra_args=["--http-tokens", str(tmp / "http-tokens")]).start()
    bearer = {"authorization": f"Bearer {token}"}
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy_applications(load_config(config(tmp)).applications)
        probe = {"model": "genesis", "prompt": "In the beginning", "max_tokens": 1}
        for model in ("genesis", "exodus", "ruth", "jonah", "obadiah"):
            wait_for(lambda m=model: httpx.post(  # type: ignore[misc]
                proxy.url + "/llm/v1/completions", json={**probe, "model": m}, headers=bearer,
                timeout=10).status_code == 200, 90, f"model {model}")
        wait_for(lambda: httpx.post(proxy.url + "/llm/v1/embeddings", headers=bearer, timeout=10,
                                    json={"model": "minilm", "input": "x"}).status_code == 200,
                 90, "model minilm")
        yield LLM(proxy.url, openai.OpenAI(base_url=proxy.url + "/llm/v1", api_key=token,
                                           max_retries=0), controller.address, bearer)
    finally:
        stop_cluster(controller, client, [proxy], kill_replicas=True)


def test_models_are_listed_and_chat_answers_with_usage(llm) -> None:
    assert sorted(m.id for m in llm.client.models.list()) == ["exodus", "genesis", "jonah",
                                                              "minilm", "obadiah", "ruth"]
    messages = [{"role": "user", "content": "Who made the heaven and the earth?"}]
    answer = llm.client.chat.completions.create(model="genesis", messages=messages,
                                                max_tokens=12, seed=3,
                                                extra_body={"ignore_eos": True})
    choice = answer.choices[0]
    assert answer.object == "chat.completion" and answer.model == "genesis"
    assert choice.message.role == "assistant" and choice.message.content
    prompt = NGramEngine().chat_prompt([ChatMessage(**m) for m in messages])
    assert answer.usage.prompt_tokens == NGramEngine().count_tokens(prompt)
    assert answer.usage.completion_tokens == 12 and choice.finish_reason == "length"


def test_streamed_chunks_are_the_usage_and_the_text(llm) -> None:
    kwargs = {"model": "genesis", "max_tokens": 20, "seed": 11,
              "extra_body": {"ignore_eos": True}}  # vLLM's extension: all 20 tokens
    streamed = {"stream": True, "stream_options": {"include_usage": True}}
    for chat in (False, True):
        if chat:
            messages = [{"role": "user", "content": "And God said"}]
            whole = llm.client.chat.completions.create(messages=messages, **kwargs)
            chunks = list(llm.client.chat.completions.create(messages=messages, **kwargs,
                                                             **streamed))
            assert chunks[0].choices[0].delta.role == "assistant"
            pieces = [c.choices[0].delta.content or "" for c in chunks[1:] if c.choices]
            text = whole.choices[0].message.content
        else:
            whole = llm.client.completions.create(prompt="And God said", **kwargs)
            chunks = list(llm.client.completions.create(prompt="And God said", **kwargs,
                                                        **streamed))
            pieces = [c.choices[0].text for c in chunks if c.choices]
            text = whole.choices[0].text
        usage = chunks[-1].usage
        assert not chunks[-1].choices and usage is not None
        assert len(pieces) == usage.completion_tokens == whole.usage.completion_tokens == 20
        assert "".join(pieces) == text  # the same seed: the same text, streamed or not
        assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_stop_seed_and_n(llm) -> None:
    greedy = llm.client.completions.create(model="genesis", prompt="And God said",
                                           max_tokens=12, temperature=0)
    text = greedy.choices[0].text
    stop = text.split()[3]  # a word some way in
    cut = llm.client.completions.create(model="genesis", prompt="And God said",
                                        max_tokens=12, temperature=0, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert stop not in cut.choices[0].text and text.startswith(cut.choices[0].text)
    twice = [llm.client.completions.create(model="exodus", prompt="And Moses", max_tokens=16,
                                           seed=42, temperature=1.0).choices[0].text
             for _ in range(2)]
    assert twice[0] == twice[1]
    two = llm.client.completions.create(model="exodus", prompt="And Moses", max_tokens=16,
                                        seed=42, n=2)
    assert [c.index for c in two.choices] == [0, 1]
    assert two.choices[0].text == twice[0]  # choice 0 has the seed itself


def test_models_sharing_a_deployment_each_answer_from_their_own_engine(llm) -> None:
    def words(model: str) -> set[str]:
        text = " ".join(llm.client.completions.create(
            model=model, prompt="And", max_tokens=40, seed=s, extra_body={"ignore_eos": True}
        ).choices[0].text for s in range(3))
        return set(text.split())
    ruth, jonah = words("ruth"), words("jonah")
    assert "Naomi" in ruth or "Boaz" in ruth or "Moab" in ruth, ruth
    assert not {"Naomi", "Boaz"} & jonah and not {"Nineveh", "Tarshish"} & ruth
    server = get_deployment_handle("Shared", "llm", controllers=llm.controller_address)
    loaded = [server.stats.remote().result(timeout_s=10)["loaded"] for _ in range(6)]
    assert all(len(held) <= 1 for held in loaded)  # max_models_per_replica: 1


def test_errors_have_openais_shape_and_status(llm) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        llm.client.completions.create(model="leviticus", prompt="x")
    assert missing.value.body["code"] == "model_not_found"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as hot:
        llm.client.chat.completions.create(model="genesis", temperature=3.5,
                                           messages=[{"role": "user", "content": "x"}])
    assert hot.value.body["param"] == "temperature"  # type: ignore[index]
    answer = httpx.post(llm.url + "/llm/v1/completions", content=b"{not json",
                        headers=llm.bearer, timeout=10)
    assert answer.status_code == 400 and answer.json()["error"]["type"] == \
        "invalid_request_error"


def test_a_full_queue_is_a_429_streamed_or_not(llm) -> None:
    hold = {"model": "obadiah", "prompt": "The vision", "max_tokens": 1_000_000,
            "stream": True, "ignore_eos": True}
    with httpx.stream("POST", llm.url + "/llm/v1/completions", json=hold, headers=llm.bearer,
                      timeout=30) as held:  # its call has the replica's one slot
        assert held.status_code == 200
        for stream in (False, True):  # a stream's status too, not an error event in a 200
            with pytest.raises(openai.RateLimitError) as full:
                llm.client.completions.create(model="obadiah", prompt="x", stream=stream)
            assert full.value.body["code"] == "overloaded"  # type: ignore[index]
    wait_for(lambda: httpx.post(llm.url + "/llm/v1/completions", headers=llm.bearer, timeout=10,
                                json={"model": "obadiah", "prompt": "x", "max_tokens": 1}
                                ).status_code == 200, 10, "the slot to be free again")


def test_the_model_replica_exposes_what_the_dashboard_reads(llm) -> None:
    """What the dashboard reads (MODEL_METRICS): a language model's replica
    exposes the llm_ series, an embedding model's the embedding_ ones."""
    from servefleet.controller.api.model_figures import MODEL_METRICS

    client = ControllerClient([llm.controller_address], timeout=30)
    try:
        [language] = client.replicas(deployment="LLMServer_genesis")
        [embedding] = client.replicas(deployment="EmbeddingServer_minilm")
    finally:
        client.close()
    # Series that appear with their first samples: a few tokens, one embedding.
    llm.client.completions.create(model="genesis", prompt="In the beginning", max_tokens=4)
    llm.client.embeddings.create(model="minilm", input="counted")
    for replica, model, prefix in ((language, "genesis", "llm_"),
                                   (embedding, "minilm", "embedding_")):
        text = httpx.get(f"http://{replica.record.metrics_address}/metrics", timeout=10).text
        exposed = {line.split("{")[0] for line in text.splitlines()
                   if f'model="{model}"' in line}
        wanted = {name for name in MODEL_METRICS if name.startswith(prefix)}
        assert wanted and wanted <= exposed, wanted - exposed


def test_a_route_that_requires_a_token_refuses_a_wrong_key(llm) -> None:
    stranger = openai.OpenAI(base_url=llm.url + "/llm/v1", api_key="not-a-token", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as refused:
        stranger.models.list()
    assert refused.value.body["code"] == "invalid_api_key"  # type: ignore[index]
    assert httpx.get(llm.url + "/llm/v1/models", timeout=10).status_code == 401


def generated(llm: LLM) -> int:
    """The Genesis replica's count of tokens generated, by a handle call to it."""
    server = get_deployment_handle("LLMServer_genesis", "llm", controllers=llm.controller_address)
    return server.stats.remote().result(timeout_s=10)["generated_tokens"]


def test_a_client_leaving_mid_stream_stops_generation(llm) -> None:
    before = generated(llm)
    body = {"model": "genesis", "prompt": "And", "max_tokens": 1_000_000, "stream": True,
            "ignore_eos": True, "seed": 5}
    received = 0
    with httpx.stream("POST", llm.url + "/llm/v1/completions", json=body, headers=llm.bearer,
                      timeout=30) as r:
        for line in r.iter_lines():
            if line.startswith("data:"):
                received += 1
            if received == 3:
                break
    wait_for(lambda: generated(llm) == generated(llm), 10, "generation to stop")
    time.sleep(0.5)
    stopped = generated(llm)
    time.sleep(0.5)
    assert generated(llm) == stopped  # nothing more: the replica stopped
    # 3 tokens read; the rest were in buffers on the way (the handle's stream
    # buffer, sockets) when the client left: a few, never the million asked for.
    assert stopped - before < 1_000, stopped - before


def test_a_client_leaving_before_a_whole_answer_stops_generation(llm) -> None:
    before = generated(llm)
    body = {"model": "genesis", "prompt": "And", "max_tokens": 1_000_000, "ignore_eos": True}
    with pytest.raises(httpx.ReadTimeout):  # the client gives up, closing its connection
        httpx.post(llm.url + "/llm/v1/completions", json=body, headers=llm.bearer, timeout=0.5)
    wait_for(lambda: generated(llm) == generated(llm), 10, "generation to stop")
    time.sleep(0.5)
    stopped = generated(llm)
    time.sleep(0.5)
    assert generated(llm) == stopped
    assert stopped - before < 500_000, stopped - before  # half a second of tokens, not 1M


def test_embeddings_through_the_openai_client(llm) -> None:
    from servefleet.llm import SentenceEncoder

    here = SentenceEncoder()  # the same model in this process (its ONNX file is cached)
    texts = ["A man is playing a guitar.", "Someone plays an instrument.",
             "The stock market fell sharply today."]
    # The client asks for base64 unless told otherwise and decodes it.
    answer = llm.client.embeddings.create(model="minilm", input=texts)
    vectors = np.array([d.embedding for d in answer.data])
    np.testing.assert_allclose(vectors, here.embed(here.tokenize(texts)), atol=1e-6)
    assert [d.index for d in answer.data] == [0, 1, 2] and answer.model == "minilm"
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == \
        sum(map(len, here.tokenize(texts)))
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.3  # paraphrase vs unrelated
    one = llm.client.embeddings.create(model="minilm", input=texts[0], encoding_format="float",
                                       dimensions=384)
    np.testing.assert_allclose(one.data[0].embedding, vectors[0], atol=1e-6)
    ids = llm.client.embeddings.create(model="minilm", input=[here.tokenize(texts[:1])[0]])
    np.testing.assert_allclose(ids.data[0].embedding, vectors[0], atol=1e-6)


def test_embedding_errors_name_the_parameter(llm) -> None:
    refusals: list[tuple[dict[str, Any], str]] = [
        ({"model": "minilm", "input": "x", "dimensions": 128}, "dimensions"),
                ({"model": "minilm", "input": ["ok", "word " * 300]}, "input[1]"),
                ({"model": "genesis", "input": "x"}, "model")]
    for kwargs, param in refusals:
        with pytest.raises(openai.BadRequestError) as refused:
            llm.client.embeddings.create(**kwargs)
        assert refused.value.body["param"] == param, refused.value.body  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as refused:
        llm.client.completions.create(model="minilm", prompt="x")
    assert refused.value.body["code"] == "model_not_supported"  # type: ignore[index]


def test_rerank_orders_documents_by_relevance(llm) -> None:
    body = {"model": "minilm", "query": "What is the capital of Germany?", "top_n": 2,
            "documents": ["Bananas are yellow.", {"text": "Berlin is Germany's capital."},
                          "Paris is in France."]}
    for path in ("/llm/v1/rerank", "/llm/rerank"):
        answer = httpx.post(llm.url + path, json=body, headers=llm.bearer, timeout=10)
        assert answer.status_code == 200, answer.text
        results = answer.json()["results"]
        assert results[0]["index"] == 1 and len(results) == 2
        assert results[0]["relevance_score"] > results[1]["relevance_score"]
        assert results[0]["document"] == {"text": "Berlin is Germany's capital."}
    empty = httpx.post(llm.url + "/llm/v1/rerank", json={**body, "documents": []},
                       headers=llm.bearer, timeout=10)
    assert empty.status_code == 400 and empty.json()["error"]["param"] == "documents"
