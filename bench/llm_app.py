"""The baseline for bench/llm.py: what a user writes by hand to stream a model's
tokens, one plain uvicorn + starlette process serving POST /v1/completions
as server-sent events in OpenAI's chunk format, from the same engine
servefleet serves (NGramEngine, kwargs from LLM_ENGINE_KWARGS as JSON).

    LLM_ENGINE_KWARGS='{"passages": "Gen1:1-Gen50:26"}' \\
        .venv/bin/python -m uvicorn llm_app:app --port 8100   (from bench/)
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from servefleet._private.llm.engine import SamplingParams
from servefleet._private.llm.ngram import NGramEngine

engine = NGramEngine(**json.loads(os.environ.get("LLM_ENGINE_KWARGS", "{}")))


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    await engine.start()
    yield


async def completions(request: Request) -> StreamingResponse:
    body = await request.json()
    params = SamplingParams(max_tokens=int(body.get("max_tokens", 16)),
                            temperature=float(body.get("temperature", 1.0)),
                            top_p=float(body.get("top_p", 1.0)), seed=body.get("seed"))
    head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
            "created": int(time.time()), "model": body.get("model", "")}

    async def events() -> AsyncIterator[bytes]:
        async for piece in engine.generate(str(body["prompt"]), params):
            chunk = {**head, "choices": [{"index": 0, "text": piece.text,
                                          "finish_reason": piece.finish_reason}]}
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])],
                lifespan=lifespan)
