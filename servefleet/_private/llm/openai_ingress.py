"""The OpenAI HTTP API in front of LLMServer deployments (one per model).

    POST {route}/v1/chat/completions   POST {route}/v1/completions
    GET  {route}/v1/models             GET  {route}/v1/models/{model}
    POST {route}/v1/embeddings         POST {route}/v1/rerank, {route}/rerank

The embedding routes are embeddings/routes.py's, over EmbeddingServer
deployments; /v1/models lists their models beside the language models.

Each request is read and checked (openai_protocol.py: a 400 naming the
parameter), sent to its model's deployment by the request's `model` field
(404 `model_not_found` for one not served) as one streaming handle call per
choice, and answered whole or, with `stream: true`, as server-sent events
(openai_responses.py). The prompt (a chat's messages so far) is the calls'
routing key, so a model deployment with `request_router: prefix_affinity`
keeps a conversation's turns on the replica that served its beginning.

A client that leaves mid-stream: starlette cancels the response's
generator, whose `finally` closes the handle calls; their connections
close, and each LLMServer replica cancels its generator at the next token.
One that leaves before its answer's head (a whole answer being generated,
a call still queued) cancels the request's task (CancelOnDisconnect), with
the same effect.
Errors the calls raise map to OpenAI's statuses: a full queue is 429, no
replica 503, an engine's ValueError 400, anything else 500 (never a
traceback), streamed or not: a stream's head goes out only once every call
has been taken and has counted the prompt. Once a stream has begun, an
error ends it with an error event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from servefleet._private.edge.disconnect import CancelOnDisconnect
from servefleet._private.embeddings.routes import EmbeddingRoutes
from servefleet._private.handle_errors import HandleError
from servefleet._private.llm.openai_protocol import (
    APIError,
    GenerationRequest,
    chat_request,
    completion_request,
)
from servefleet._private.llm.openai_responses import DONE, Choice, Reply, event

logger = logging.getLogger(__name__)


def api_error(e: BaseException) -> APIError:
    """What a failed call means to an OpenAI client."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, ValueError):
        return APIError(400, str(e))
    if isinstance(e, HandleError) and type(e).__name__ == "BackPressureError":
        return APIError(429, f"the model is busy, retry later: {e}", code="overloaded",
                        kind="rate_limit_error")
    if isinstance(e, HandleError) and e.status in (502, 503, 504):
        return APIError(503, f"the model is unavailable: {e}", code="unavailable",
                        kind="server_error")
    logger.error("a generation failed: %s: %s", type(e).__name__, e)
    return APIError(500, "the model failed to answer; see the server's logs",
                    kind="server_error")


def error_response(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


class OpenAIIngress:
    """An ASGI deployment: the OpenAI routes over `models` (model id -> handle
    of its LLMServer deployment)."""

    def __init__(self, models: dict[str, Any], multiplexed: list[str] | None = None,
                 embedding_models: dict[str, Any] | None = None) -> None:
        self.models = models
        # Models served several per replica: their calls name the model.
        self.multiplexed = set(multiplexed or ())
        self.embeddings = EmbeddingRoutes(dict(embedding_models or {}), list(models), api_error)
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat, methods=["POST"]),
            Route("/v1/completions", self._completions, methods=["POST"]),
            Route("/v1/models", self._list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", self._one_model, methods=["GET"]),
            *self.embeddings.routes(),
        ])

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    # -- models ------------------------------------------------------------------

    def _card(self, model: str) -> dict[str, Any]:
        return {"id": model, "object": "model", "created": 0, "owned_by": "servefleet"}

    async def _list_models(self, request: Request) -> Response:
        every = [*self.models, *self.embeddings.models]
        return JSONResponse({"object": "list", "data": [self._card(m) for m in every]})

    async def _one_model(self, request: Request) -> Response:
        model = request.path_params["model"]
        if model not in self.models and model not in self.embeddings.models:
            return error_response(self._unknown(model))
        return JSONResponse(self._card(model))

    def _unknown(self, model: str) -> APIError:
        if model in self.embeddings.models:
            return APIError(400, f"the model {model!r} is an embedding model: it does not "
                                 f"generate; language models: {', '.join(sorted(self.models))}",
                            param="model", code="model_not_supported")
        return APIError(404, f"the model {model!r} does not exist; served: "
                             f"{', '.join(sorted([*self.models, *self.embeddings.models]))}",
                        param="model", code="model_not_found")

    # -- generation --------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        return await self._serve(request, chat_request)

    async def _completions(self, request: Request) -> Response:
        return await self._serve(request, completion_request)

    async def _serve(self, request: Request, read: Any) -> Response:
        try:
            try:
                body = json.loads(await request.body())
            except ValueError as e:
                raise APIError(400, f"the body is not valid JSON: {e}") from None
            wanted: GenerationRequest = read(body)
            if wanted.model not in self.models:
                raise self._unknown(wanted.model)
            streams = [self._call(wanted, i) for i in range(wanted.n)]
            # Until the head goes out nothing here reads the client's
            # connection (an ASGI app learns of a departure only by asking):
            # a client that leaves cancels this task, which closes the calls.
            with CancelOnDisconnect(request.scope, request.receive) as gone:
                try:
                    if not wanted.stream:
                        return JSONResponse(await self._whole(wanted, streams))
                    prompt_tokens = await _opened(streams)
                except asyncio.CancelledError:
                    if not gone.left:
                        raise
                    asyncio.current_task().uncancel()  # type: ignore[union-attr]
                    return Response(status_code=499)  # nobody reads it
            # Streamed: starlette's response stops when the client leaves.
            return StreamingResponse(self._events(wanted, streams, prompt_tokens),
                                     media_type="text/event-stream",
                                     headers={"cache-control": "no-cache"})
        except APIError as e:
            return error_response(e)

    def _call(self, wanted: GenerationRequest, index: int) -> Any:
        messages = wanted.messages if wanted.chat else None
        # The conversation so far as the routing key: a prefix-affinity router
        # (docs/routing.md) keeps its turns on the replica that has its prefix.
        key = "\n".join(f"{m.role}: {m.content}" for m in wanted.messages) if wanted.chat \
            else wanted.prompt
        handle = self.models[wanted.model].options(
            stream=True, method_name="generate", routing_key=key,
            multiplexed_model_id=wanted.model if wanted.model in self.multiplexed else "")
        return handle.remote(wanted.prompt, messages, wanted.with_seed(index))

    async def _whole(self, wanted: GenerationRequest, streams: list[Any]) -> dict[str, Any]:
        choices = [Choice() for _ in streams]
        prompt_tokens = 0

        async def collect(stream: Any, choice: Choice) -> None:
            nonlocal prompt_tokens
            async for item in stream:
                if "prompt_tokens" in item:
                    prompt_tokens = item["prompt_tokens"]
                    continue
                choice.text += item["text"]
                choice.tokens += 1
                choice.finish_reason = item["finish_reason"]
        try:
            await asyncio.gather(*(collect(s, c) for s, c in zip(streams, choices, strict=True)))
        except Exception as e:
            raise api_error(e) from None
        finally:
            await _close(streams)
        return Reply(wanted.model, wanted.chat).complete(choices, prompt_tokens)

    async def _events(self, wanted: GenerationRequest, streams: list[Any],
                      prompt_tokens: int) -> AsyncIterator[bytes]:
        reply = Reply(wanted.model, wanted.chat, wanted.include_usage)
        completion_tokens = 0
        try:
            if wanted.chat:
                for index in range(len(streams)):
                    yield reply.role_chunk(index)
            async for index, item in _merged(streams):
                completion_tokens += 1
                yield reply.piece_chunk(index, item["text"], item["finish_reason"])
            if wanted.include_usage:
                yield reply.usage_chunk(prompt_tokens, completion_tokens)
            yield DONE
        except Exception as e:  # after the head went out: an error event ends the stream
            yield event(api_error(e).body())
            yield DONE
        finally:
            await _close(streams)


async def _opened(streams: list[Any]) -> int:
    """The prompt's token count, the first item of every call (LLMServer sends
    it before it generates). Read before the answer's head goes out, so that
    a call no replica takes (a full queue, no replica) or that the engine
    refuses is answered with its status (429, 503, 400), not as an error
    event in a 200 stream."""
    try:
        heads = await asyncio.gather(*(anext(s) for s in streams))
    except BaseException as e:  # cancelled too (the client left): close the calls
        await _close(streams)
        if isinstance(e, Exception):
            raise api_error(e) from None
        raise
    return int(heads[0]["prompt_tokens"])


async def _merged(streams: list[Any]) -> AsyncIterator[tuple[int, dict[str, Any]]]:
    """(choice index, item) from every stream as they come; one stream read in place."""
    if len(streams) == 1:
        async for item in streams[0]:
            yield 0, item
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
    end = object()

    async def pump(index: int, stream: Any) -> None:
        try:
            async for item in stream:
                await queue.put((index, item))
            await queue.put((index, end))
        except Exception as e:
            await queue.put((index, e))
    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            index, item = await queue.get()
            if item is end:
                left -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()


async def _close(streams: list[Any]) -> None:
    for stream in streams:
        with contextlib.suppress(Exception):
            await stream.aclose()
