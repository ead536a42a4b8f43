"""How a handler's result becomes the HTTP answer, as Ray Serve makes it:
a starlette Response as it is; str as text; bytes as they are; generators
streamed; anything else as JSON by FastAPI's jsonable_encoder rules
(jsonable.py: pydantic models, dataclasses, numpy arrays and scalars...).
The common plain answers (str, and dicts and lists of JSON values) are made
directly and sent in one step when the server is servefleet's own.

Also: whether a handler takes the request at all (Ray calls a `__call__` or
function without parameters without one), and a handle call's pickled
answers: `FrameAnswer` written segment by segment, `pickled_items` for a
streaming call."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import traceback
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import iterate_in_threadpool
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

import servefleet._private.handles.values as values
from servefleet._private.batching.multiplex import loaded_model_ids
from servefleet._private.edge.http_protocol import RAW_KEY, RawResponse
from servefleet._private.wire import REFUSAL_STATUS_HEADER, REQUEST_ID_HEADER

from .jsonable import jsonable

logger = logging.getLogger(__name__)


def plain_answer(result: Any) -> tuple[bytes, bytes] | None:
    """(body, content type) of a str, dict or list result, as Starlette's
    PlainTextResponse and JSONResponse make them, without making one (the
    common answers, sent as two ASGI messages); None for any other result,
    and for dicts and lists holding more than JSON values (to_response
    encodes those)."""
    kind = type(result)
    if kind is str:
        return result.encode(), b"text/plain; charset=utf-8"
    if kind is dict or kind is list:
        try:
            return json.dumps(result, ensure_ascii=False, allow_nan=False, indent=None,
                              separators=(",", ":")).encode(), b"application/json"
        except (TypeError, ValueError):
            return None
    return None


def sent_raw(scope: Scope, body: bytes, content_type: bytes, request_id: str) -> bool:
    """Send a plain answer as HTTP/1.1 bytes in one step when the server is
    servefleet's own (http_protocol.RawResponse); False when it must go
    through ASGI (another server, models to report, an id uvicorn would
    refuse as a header value)."""
    raw: RawResponse | None = scope.get(RAW_KEY)
    if raw is None or not request_id.isprintable() or loaded_model_ids():
        return False
    head = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\ncontent-type: %s\r\n%s: %s\r\n\r\n" % (
        len(body), content_type, REQUEST_ID_HEADER, request_id.encode("latin-1"))
    return raw(scope, head, body, server_headers=True)


def to_response(result: Any) -> Response:
    if isinstance(result, Response):
        return result
    if isinstance(result, str):
        return PlainTextResponse(result)
    if isinstance(result, bytes | bytearray | memoryview):
        return Response(bytes(result), media_type="application/octet-stream")
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        chunks: Any = result  # of str or bytes, as the handler yields them
        return StreamingResponse(chunks, media_type="text/plain")
    return JSONResponse(jsonable(result))


def takes_request(fn: Any) -> bool:
    """Whether an HTTP handler takes a positional parameter (the request)."""
    try:
        return _takes_request(fn)
    except TypeError:  # unhashable: asked each time
        return _takes_request.__wrapped__(fn)


@functools.lru_cache(maxsize=256)
def _takes_request(fn: Any) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # no signature to read (some builtins): as before
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in parameters)


class FrameAnswer:
    """A handle call's answer: a frame (servefleet/_private/handles/values.py) whose segments
    go out one by one, so an array's memory is written as it is."""

    def __init__(self, parts: list[values.Buffer], status_code: int = 200) -> None:
        self.parts = parts
        self.status_code = status_code

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": [(b"content-type", values.CONTENT_TYPE),
                                (b"content-length",
                                 b"%d" % values.frame_length(self.parts))]})
        last = len(self.parts) - 1
        for i, part in enumerate(self.parts):
            await send({"type": "http.response.body", "body": part, "more_body": i < last})


async def pickled_items(items: Any, request_id: str, where: str) -> AsyncIterator[Any]:
    """A generator's yields as length-prefixed frames; its exception as a
    last error frame. A caller that leaves cancels this, and so the user's
    generator."""
    try:
        if inspect.isasyncgen(items):
            async for item in items:
                for part in values.stream_item(values.frame(item)):
                    yield part
        else:
            async for item in iterate_in_threadpool(items):
                for part in values.stream_item(values.frame(item)):
                    yield part
    except Exception as e:
        logger.exception("request %s: streaming handle call %s failed", request_id, where)
        for part in values.stream_item([values.error_frame(e, traceback.format_exc())]):
            yield part
    finally:
        await close_generator(items)


async def close_generator(generator: Any) -> None:
    if inspect.isasyncgen(generator):
        await generator.aclose()
    else:
        generator.close()


def refusal_status(scope: Scope) -> int:
    """The status of the replica's own refusal (loading, draining, full): 503,
    or 425 for a data plane that asked for it (REFUSAL_STATUS_HEADER), which
    retries by status only."""
    asked = next((v for k, v in scope["headers"] if k == REFUSAL_STATUS_HEADER), None)
    return 425 if asked == b"425" else 503
