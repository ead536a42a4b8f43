"""Answers to the client: the proxy's own (`reply`) and a replica's, passed back
(`stream_back`), with the hop-by-hop headers that never cross the proxy."""

from __future__ import annotations

import json
import logging

from starlette.types import Scope, Send

from servefleet._private.dataplane.upstream import Response, UpstreamError
from servefleet._private.edge.deadlines import Bound
from servefleet._private.edge.http_protocol import RAW_KEY, RawResponse
from servefleet._private.wire import MODELS_HEADER, REQUEST_ID_HEADER

logger = logging.getLogger(__name__)

HOP_BY_HOP = {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
              b"te", b"trailers", b"transfer-encoding", b"upgrade"}
# An answer with none of these headers can go to the client as the replica sent it.
NOT_PASSED_BACK = HOP_BY_HOP | {MODELS_HEADER}


def and_named_by_connection(headers: list[tuple[bytes, bytes]],
                            base: set[bytes]) -> set[bytes]:
    """`base` plus the headers a Connection header names: they are hop-by-hop
    too and must not be forwarded (RFC 9110, section 7.6.1)."""
    named = {token.strip().lower() for k, v in headers if k == b"connection"
             for token in v.split(b",")}
    return base | named if named else base


async def reply(send: Send, status: int, text: str, request_id: str = "",
                content_type: bytes = b"text/plain; charset=utf-8",
                extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """The proxy's own answer: `text`, with the request's id when it has one."""
    body = text.encode()
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()),
               *extra]
    if request_id:
        headers.append((REQUEST_ID_HEADER, request_id.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def refuse_token(scope: Scope, send: Send, request_id: str) -> None:
    """401 for a route that needs a bearer token: as text, or, to a client that
    takes only JSON (OpenAI's clients), as the common error object
    {"error": {message, type, param, code}}."""
    text = "this route needs a bearer token (authorization: Bearer TOKEN)"
    accept = next((v for k, v in scope["headers"] if k == b"accept"), b"")
    challenge = ((b"www-authenticate", b'Bearer realm="servefleet"'),)
    if b"json" in accept and b"text" not in accept and b"*/*" not in accept:
        body = json.dumps({"error": {"message": text, "type": "invalid_request_error",
                                     "param": None, "code": "invalid_api_key"}})
        await reply(send, 401, body, request_id, b"application/json", challenge)
    else:
        await reply(send, 401, text, request_id, extra=challenge)


class Started:
    """Whether a request's response has begun (a timeout can then only cut it
    short), with what status, and which deployment it went to (for metrics)."""

    value = False
    code = 0
    deployment = ""
    # The default bound on the wait for an answer (routes.DEFAULT_ANSWER_START_S),
    # lifted once the answer begins; None when a request timeout bounds the whole.
    until_start: Bound | None = None


async def stream_back(scope: Scope, send: Send, request_id: str, started: Started,
                      response: Response) -> None:
    """Send a replica's answer on to the client as it comes. One that arrived
    whole with its head, and has no header the proxy must drop, goes on as
    the replica's bytes (RawResponse, when the server is servefleet's own)."""
    started.value = True
    if started.until_start is not None:
        started.until_start.lift()
    body = response.buffered_body()
    if body is not None:
        raw: RawResponse | None = scope.get(RAW_KEY)
        if (raw is not None and response.raw_head
                and not any(k in NOT_PASSED_BACK for k, _ in response.headers)
                and raw(scope, response.raw_head, body)):
            started.code = response.status
            return
    dropped = and_named_by_connection(response.headers, NOT_PASSED_BACK)
    await send({"type": "http.response.start", "status": response.status,
                "headers": [(k, v) for k, v in response.headers if k not in dropped]})
    if body is not None:  # arrived with the head: one message, no iteration
        await send({"type": "http.response.body", "body": body})
        return
    try:
        async for chunk in response.chunks():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except UpstreamError as e:
        # The status line is out: all that is left is to cut the response short.
        logger.warning("request %s: %s", request_id, e)
        raise ConnectionResetError from None
    await send({"type": "http.response.body", "body": b""})
