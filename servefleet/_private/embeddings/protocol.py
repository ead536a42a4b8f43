"""The bodies of POST /v1/embeddings and /v1/rerank, read and checked, and the answers.

`embeddings_request(body)` and `rerank_request(body)` turn a parsed JSON body
into an `EmbeddingsRequest` or `RerankRequest`, or raise `APIError` naming
the parameter (400, invalid_request_error), as OpenAI does. What only the
model can check (an input's length in its word pieces, a token id past its
vocabulary, `dimensions` other than its own) is checked at its replica,
which raises `BadInput`: a ValueError that names the parameter and crosses
a handle call as it is.

/v1/embeddings is OpenAI's: `input` is a string, an array of strings, an
array of token ids or an array of such arrays (ids of the model's own
vocabulary, as its tokenizer gives them, [CLS] and [SEP] included);
`encoding_format` "float" or "base64" (little-endian float32, which the
`openai` client asks for and decodes); `dimensions`; `user`.
/v1/rerank is the shape Cohere, Jina and vLLM share: `query`, `documents`
(strings or {"text": ...}), `top_n`, `return_documents` (default true).
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from servefleet._private.llm.openai_protocol import APIError, bad

if TYPE_CHECKING:  # numpy: only where a model runs (the embeddings extra)
    import numpy as np

MAX_INPUTS = 2048      # OpenAI's bound on one request's inputs
MAX_DOCUMENTS = 1000   # one rerank's documents
ENCODINGS = ("float", "base64")


class BadInput(ValueError):
    """An input the model refuses: `param` names it (input[3], dimensions)."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(param, message)  # the args pickle: it crosses handle calls
        self.param, self.message = param, message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class EmbeddingsRequest:
    model: str
    inputs: list[str] | list[list[int]]  # every input text, or every input token ids
    encoding_format: str = "float"
    dimensions: int | None = None


@dataclass(frozen=True)
class RerankRequest:
    model: str
    query: str
    documents: list[str]
    top_n: int
    return_documents: bool = True


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", "model must be the id of a served model (GET /v1/models)")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise bad("user", "user must be a string")
    return body


def _token_ids(value: list[Any], where: str) -> list[int]:
    if not value:
        raise bad(where, f"{where} is an empty array of token ids")
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise bad(where, f"{where} must be an array of integer token ids")
    return value


def _inputs(value: Any) -> list[str] | list[list[int]]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise bad("input", "input must be a string, an array of strings, an array of token "
                           "ids or an array of arrays of token ids, and not empty")
    if len(value) > MAX_INPUTS:
        raise bad("input", f"input takes at most {MAX_INPUTS} items, got {len(value)}")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [_token_ids(value, "input")]
    if all(isinstance(v, str) for v in value):
        for i, text in enumerate(value):
            if not text:
                raise bad(f"input[{i}]" if len(value) > 1 else "input",
                          "input must not be an empty string")
        return value
    if all(isinstance(v, list) for v in value):
        return [_token_ids(v, f"input[{i}]") for i, v in enumerate(value)]
    raise bad("input", "input mixes kinds: give strings, or token ids, not both")


def embeddings_request(body: Any) -> EmbeddingsRequest:
    body = _object(body)
    encoding = body.get("encoding_format") or "float"
    if encoding not in ENCODINGS:
        raise bad("encoding_format", f"encoding_format must be 'float' or 'base64', "
                                     f"not {encoding!r}")
    dimensions = body.get("dimensions")
    if dimensions is not None and (isinstance(dimensions, bool) or
                                   not isinstance(dimensions, int) or dimensions < 1):
        raise bad("dimensions", f"dimensions must be a positive integer, got {dimensions!r}")
    return EmbeddingsRequest(model=body["model"], inputs=_inputs(body.get("input")),
                             encoding_format=encoding, dimensions=dimensions)


def _document(value: Any, index: int) -> str:
    if isinstance(value, dict):
        value = value.get("text")
    if not isinstance(value, str) or not value:
        raise bad(f"documents[{index}]", f"documents[{index}] must be a non-empty string "
                                         "or an object with a non-empty text")
    return value


def rerank_request(body: Any) -> RerankRequest:
    body = _object(body)
    query = body.get("query")
    if not isinstance(query, str) or not query:
        raise bad("query", "query must be a non-empty string")
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents:
        raise bad("documents", "documents must be a non-empty array of strings")
    if len(documents) > MAX_DOCUMENTS:
        raise bad("documents", f"documents takes at most {MAX_DOCUMENTS} items, "
                               f"got {len(documents)}")
    top_n = body.get("top_n")
    if top_n is None:
        top_n = len(documents)
    elif isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise bad("top_n", f"top_n must be a positive integer, got {top_n!r}")
    keep = body.get("return_documents", True)
    if not isinstance(keep, bool):
        raise bad("return_documents", "return_documents must be true or false")
    return RerankRequest(model=body["model"], query=query,
                         documents=[_document(d, i) for i, d in enumerate(documents)],
                         top_n=min(top_n, len(documents)), return_documents=keep)


# -- answers ---------------------------------------------------------------------------


def encode(vector: np.ndarray, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.tolist()


def embeddings_answer(wanted: EmbeddingsRequest, vectors: np.ndarray,
                      prompt_tokens: int) -> dict[str, Any]:
    return {"object": "list", "model": wanted.model,
            "data": [{"object": "embedding", "index": i,
                      "embedding": encode(v, wanted.encoding_format)}
                     for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def rerank_answer(wanted: RerankRequest, scores: list[float],
                  total_tokens: int) -> dict[str, Any]:
    """The top_n documents by score, highest first (ties: the earlier document)."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:wanted.top_n]
    results = []
    for i in order:
        result: dict[str, Any] = {"index": i, "relevance_score": float(scores[i])}
        if wanted.return_documents:
            result["document"] = {"text": wanted.documents[i]}
        results.append(result)
    return {"id": f"rerank-{uuid.uuid4().hex}", "model": wanted.model, "results": results,
            "usage": {"total_tokens": total_tokens}}
