"""The ceiling for bench/embeddings.py: all-MiniLM-L6-v2 served by hand, one plain
uvicorn + starlette process, POST /v1/embeddings in OpenAI's shape, with
servefleet's SentenceEncoder and, when EMBEDDINGS_BATCHED=1, the same
token-budget batching an EmbeddingServer replica runs (TokenBatcher,
EMBEDDINGS_MAX_BATCH_TOKENS, default 8192; EMBEDDINGS_THREADS: ONNX Runtime's,
default one per core); tokenizing in a worker thread as there. No proxy,
no ingress, no handle: what servefleet's hops are measured against.
GET /stats: the batches so far (runs, inputs, input and padded tokens).

    EMBEDDINGS_BATCHED=1 .venv/bin/python -m uvicorn embeddings_app:app --port 8100  (from bench/)
"""

from __future__ import annotations

import asyncio
import json
import os

from embeddings_model import answer
from prometheus_client import REGISTRY
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from servefleet._private.embeddings.batched import DEFAULT_BATCH_WAIT_TIMEOUT_S, TokenBatcher
from servefleet._private.embeddings.encoder import SentenceEncoder

encoder = SentenceEncoder(threads=int(os.environ.get("EMBEDDINGS_THREADS", "0")))
encoder.warm()
batcher = (TokenBatcher(encoder, "ceiling", int(os.environ.get("EMBEDDINGS_MAX_BATCH_TOKENS",
                                                                "8192")),
                        DEFAULT_BATCH_WAIT_TIMEOUT_S)
           if os.environ.get("EMBEDDINGS_BATCHED") == "1" else None)


async def embeddings(request: Request) -> Response:
    body = json.loads(await request.body())
    texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
    ids = await asyncio.to_thread(encoder.tokenize, texts)
    if batcher is not None:
        vectors = await batcher.embed(ids)
    else:
        vectors = await asyncio.to_thread(encoder.embed, ids)
    return JSONResponse(answer(vectors, sum(len(s) for s in ids)))


async def stats(request: Request) -> Response:
    labels = {"model": "ceiling", "application": "", "deployment": "", "replica": ""}
    return JSONResponse({name: REGISTRY.get_sample_value(f"embedding_{name}_total", labels) or 0
                         for name in ("batches", "inputs", "input_tokens", "padded_tokens")})


app = Starlette(routes=[Route("/v1/embeddings", embeddings, methods=["POST"]),
                        Route("/stats", stats)])
