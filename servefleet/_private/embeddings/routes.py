"""The embedding routes of the OpenAI ingress, over EmbeddingServer deployments.

    POST {route}/v1/embeddings                  OpenAI's
    POST {route}/v1/rerank, POST {route}/rerank  Cohere's, Jina's and vLLM's shape

Each request is read and checked (protocol.py: a 400 naming the parameter),
sent by its `model` field to that model's deployment as one handle call
(`embed` or `rerank`), and answered in the API's shape. A language model's
id is a 400 naming `model` (it does not embed); an id nobody serves, 404
model_not_found. What the replica refuses (BadInput: an input too long, a
token id outside the vocabulary, other `dimensions`) is a 400 naming it;
other failures are mapped as the language routes map them (`api_error`:
429 busy, 503 unavailable, 500).

A client that leaves before its answer: the ingress's replica cancels the
request (replica/asgi_calls.py), which closes its handle call; the model's
replica cancels the call in turn, and its inputs leave the batch queue (or
drop out of a batch not yet run: batching/batch_queue.py). Neither replica
counts the request any more, though a batch already running finishes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from servefleet._private.embeddings import protocol
from servefleet._private.embeddings.protocol import BadInput
from servefleet._private.llm.openai_protocol import APIError


class EmbeddingRoutes:
    """The routes over `models` (model id -> handle of its EmbeddingServer);
    `language_models` are the ingress's other model ids, named in refusals;
    `api_error` maps a failed call to OpenAI's error."""

    def __init__(self, models: dict[str, Any], language_models: list[str],
                 api_error: Callable[[BaseException], APIError]) -> None:
        self.models = models
        self.language_models = language_models
        self.api_error = api_error

    def routes(self) -> list[Route]:
        return [Route("/v1/embeddings", self._embeddings, methods=["POST"]),
                Route("/v1/rerank", self._rerank, methods=["POST"]),
                Route("/rerank", self._rerank, methods=["POST"])]

    def refuse_model(self, model: str) -> APIError:
        """Why `model` does not embed: a language model (400), or unknown (404)."""
        if model in self.language_models:
            return APIError(400, f"the model {model!r} is a language model: it does not embed; "
                                 f"embedding models: {', '.join(sorted(self.models)) or 'none'}",
                            param="model", code="model_not_supported")
        return APIError(404, f"the model {model!r} does not exist; embedding models served: "
                             f"{', '.join(sorted(self.models)) or 'none'}", param="model",
                        code="model_not_found")

    async def _body(self, request: Request) -> Any:
        try:
            return json.loads(await request.body())
        except ValueError as e:
            raise APIError(400, f"the body is not valid JSON: {e}") from None

    async def _call(self, model: str, method: str, *args: Any) -> dict[str, Any]:
        if model not in self.models:
            raise self.refuse_model(model)
        try:
            handle = self.models[model].options(method_name=method)
            return await handle.remote(*args)
        except BadInput as e:
            raise APIError(400, e.message, param=e.param) from None
        except Exception as e:
            raise self.api_error(e) from None

    async def _embeddings(self, request: Request) -> Response:
        try:
            wanted = protocol.embeddings_request(await self._body(request))
            done = await self._call(wanted.model, "embed", wanted.inputs, wanted.dimensions)
            return JSONResponse(protocol.embeddings_answer(wanted, done["vectors"],
                                                           done["prompt_tokens"]))
        except APIError as e:
            return JSONResponse(e.body(), status_code=e.status)

    async def _rerank(self, request: Request) -> Response:
        try:
            wanted = protocol.rerank_request(await self._body(request))
            done = await self._call(wanted.model, "rerank", wanted.query, wanted.documents)
            return JSONResponse(protocol.rerank_answer(wanted, done["scores"],
                                                       done["total_tokens"]))
        except APIError as e:
            return JSONResponse(e.body(), status_code=e.status)
