"""How a handler's result becomes the HTTP answer: Starlette responses for
anything, and the common plain answers (str, dict, list) made directly, sent
in one step when the server is servefleet's own."""

from __future__ import annotations

import inspect
import json
from typing import Any

from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.types import Scope

from servefleet.http_protocol import RAW_KEY, RawResponse
from servefleet.multiplex import loaded_model_ids
from servefleet.wire import REQUEST_ID_HEADER


def plain_answer(result: Any) -> tuple[bytes, bytes] | None:
    """(body, content type) of a str, dict or list result, as Starlette's
    PlainTextResponse and JSONResponse make them, without making one (the
    common answers, sent as two ASGI messages); None for any other result."""
    kind = type(result)
    if kind is str:
        return result.encode(), b"text/plain; charset=utf-8"
    if kind is dict or kind is list:
        return json.dumps(result, ensure_ascii=False, allow_nan=False, indent=None,
                          separators=(",", ":")).encode(), b"application/json"
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
    return JSONResponse(result)
