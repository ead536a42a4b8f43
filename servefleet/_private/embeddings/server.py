"""EmbeddingServer: the deployment that holds one embedding model in each replica.

The model is made in the constructor from an import path and JSON kwargs
(default `SentenceEncoder`: all-MiniLM-L6-v2 on ONNX Runtime) and warmed
there too (`warm()`: one run of the longest input), so the replica reports
ready only once its model answers at full speed: a replica runs its
deployment's constructor before it says READY.

The ingress (routes.py) calls `embed` and `rerank` through handles. Inputs
longer than the model takes (its `max_tokens` word pieces) are refused
naming the input, or cut to it with `truncate: true`. Tokenizing and the
model's run happen in worker threads, so the replica's event loop stays free.

The sequences of concurrent requests are batched by token budget
(batched.py: similar lengths together, at most `max_batch_tokens` padded
tokens a batch, one batch at a time); `max_batch_tokens: 0` runs each
request's inputs as one run of their own, concurrently with the others'.
Every run is recorded per model (embedding_metrics.py).

A model is any object with what `SentenceEncoder` offers: `dimensions`,
`max_tokens`, `vocab_size`, `tokenize(texts) -> ids`, `truncate(ids)`,
`embed(sequences) -> [n, dimensions] unit vectors` (one batch; a batcher
can sit in front of it) and `warm()`. A model with
`score(query, documents) -> [float]` (a cross-encoder) answers /v1/rerank with
it; others by the cosine of the query's and each document's vectors. A
model with `score` and no `embed` only reranks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from servefleet._private.applications.user_code import import_user_object
from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.embeddings.batched import (
    DEFAULT_BATCH_WAIT_TIMEOUT_S,
    DEFAULT_MAX_BATCH_TOKENS,
    TokenBatcher,
    check_settings,
)
from servefleet._private.embeddings.embedding_metrics import record_run
from servefleet._private.embeddings.protocol import BadInput

DEFAULT_MODEL = "servefleet._private.embeddings.encoder:SentenceEncoder"
MODEL_METHODS = ("tokenize", "truncate", "warm")


def load_model(path: str, kwargs: dict[str, Any]) -> Any:
    """The model class at `path` ("module:Class"), made with `kwargs`; user code
    by the rules every import path meets (user_code.py). It needs MODEL_METHODS
    and `embed` or `score` (a cross-encoder may only score); TypeError if not."""
    model = import_user_object(colon_form(path))(**kwargs)
    missing = [m for m in MODEL_METHODS if not callable(getattr(model, m, None))]
    if not any(callable(getattr(model, m, None)) for m in ("embed", "score")):
        missing.append("embed or score")
    if missing:
        raise TypeError(f"{path} is not an embedding model: it lacks {', '.join(missing)}")
    return model


class EmbeddingServer:
    """One embedding model per replica: `embed` and `rerank`.

    - `model_id`: the name clients ask for;
    - `model`, `model_kwargs`: the model class ("module:Class") and its
      constructor's JSON arguments (default all-MiniLM-L6-v2);
    - `truncate`: cut inputs longer than the model takes instead of refusing
      them (default False: a 400 naming the input);
    - `max_batch_tokens`, `batch_wait_timeout_s`: batching by token budget
      (batched.py); 0 tokens: no batching.
    """

    def __init__(self, model_id: str, model: str = DEFAULT_MODEL,
                 model_kwargs: dict[str, Any] | None = None, truncate: bool = False,
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S) -> None:
        self.model_id = model_id
        self.truncate = bool(truncate)
        self.model = load_model(model, dict(model_kwargs or {}))
        check_settings(max_batch_tokens, batch_wait_timeout_s, self.model.max_tokens)
        self.batcher = None if not max_batch_tokens or not callable(
            getattr(self.model, "embed", None)) else TokenBatcher(
                self.model, model_id, max_batch_tokens, batch_wait_timeout_s)
        self.tags = {"model": model_id}
        self.model.warm()
        self.inputs = 0
        self.tokens = 0

    def _fit(self, ids: Sequence[int], param: str) -> list[int]:
        limit = self.model.max_tokens
        if len(ids) <= limit:
            return list(ids)
        if self.truncate:
            return list(self.model.truncate(ids))
        raise BadInput(param, f"{param} is {len(ids)} tokens; {self.model_id} takes at most "
                              f"{limit} (this deployment refuses longer inputs: "
                              f"truncate: true would cut them)")

    def _sequences(self, inputs: Sequence[str] | Sequence[Sequence[int]],
                   param: str = "input") -> list[list[int]]:
        def where(i: int) -> str:
            return f"{param}[{i}]" if len(inputs) > 1 else param
        if inputs and isinstance(inputs[0], str):
            ids = self.model.tokenize(inputs)
        else:
            ids = [list(s) for s in inputs]
            vocabulary = self.model.vocab_size
            for i, sequence in enumerate(ids):
                if any(t < 0 or t >= vocabulary for t in sequence):
                    raise BadInput(where(i), f"{where(i)} holds a token id outside "
                                             f"{self.model_id}'s vocabulary [0, {vocabulary})")
        return [self._fit(s, where(i)) for i, s in enumerate(ids)]

    def _checked(self, inputs: Sequence[Any], dimensions: int | None) -> list[list[int]]:
        if not callable(getattr(self.model, "embed", None)):
            raise BadInput("model", f"{self.model_id} only scores (a cross-encoder): "
                                    "ask it POST /v1/rerank")
        if dimensions is not None and dimensions != self.model.dimensions:
            raise BadInput("dimensions", (
                f"{self.model_id} gives {self.model.dimensions}-dimensional vectors only; "
                f"it was not trained for shorter ones (as OpenAI's text-embedding-3 "
                f"models were), so dimensions {dimensions} is refused"))
        return self._sequences(inputs)

    def _run(self, sequences: list[list[int]]) -> tuple[np.ndarray, float]:
        """One run of the model over `sequences` (no batching), and its seconds."""
        started = time.perf_counter()
        return self.model.embed(sequences), time.perf_counter() - started

    async def _vectors(self, sequences: list[list[int]]) -> np.ndarray:
        """The sequences' vectors: batched with other requests', or one run of their own."""
        if self.batcher is not None:
            return await self.batcher.embed(sequences)
        vectors, seconds = await asyncio.to_thread(self._run, sequences)
        record_run(self.tags, [len(s) for s in sequences], seconds)
        return vectors

    async def embed(self, inputs: Sequence[str] | Sequence[Sequence[int]],
                    dimensions: int | None = None) -> dict[str, Any]:
        """{"vectors": float32 [len(inputs), dimensions], "prompt_tokens": N} for
        texts or token id sequences. Raises BadInput naming what it refuses."""
        if inputs and isinstance(inputs[0], str):  # tokenized in a thread
            sequences = await asyncio.to_thread(self._checked, inputs, dimensions)
        else:
            sequences = self._checked(inputs, dimensions)
        vectors = await self._vectors(sequences)
        tokens = sum(len(s) for s in sequences)
        self.inputs += len(sequences)
        self.tokens += tokens
        return {"vectors": vectors, "prompt_tokens": tokens}

    def _rerank_sequences(self, query: str, documents: Sequence[str]) -> list[list[int]]:
        [query_ids] = self._sequences([query], "query")
        return [query_ids, *self._sequences(documents, "documents")]

    async def rerank(self, query: str, documents: Sequence[str]) -> dict[str, Any]:
        """{"scores": one per document, in order; "total_tokens": N}."""
        [query_ids, *document_ids] = await asyncio.to_thread(self._rerank_sequences, query,
                                                             documents)
        score = getattr(self.model, "score", None)
        if callable(score):  # a cross-encoder: the query and each document read together
            scores = [float(s) for s in await asyncio.to_thread(score, query, list(documents))]
            tokens = len(query_ids) * len(documents) + sum(len(d) for d in document_ids)
        else:  # cosine: the vectors are unit vectors
            vectors = await self._vectors([query_ids, *document_ids])
            scores = [float(s) for s in vectors[1:] @ vectors[0]]
            tokens = len(query_ids) + sum(len(d) for d in document_ids)
        self.inputs += 1 + len(documents)
        self.tokens += tokens
        return {"scores": scores, "total_tokens": tokens}

    async def stats(self) -> dict[str, Any]:
        """This replica's model and what it embedded."""
        return {"model": self.model_id, "dimensions": getattr(self.model, "dimensions", None),
                "max_tokens": self.model.max_tokens, "inputs": self.inputs,
                "tokens": self.tokens}
