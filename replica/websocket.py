"""WebSocket routes of an ASGI ingress (Starlette's WebSocketRoute, FastAPI's
`@app.websocket`), with the replica's admission and draining.

A WebSocket passes the same admission as an HTTP request and counts as one
ongoing request for as long as it is open: while loading, draining or full
the handshake is refused 503 with `x-servefleet-rejected`, which the proxy
reads as "never accepted" and takes to another replica. A deployment that is
not an ASGI app serves no WebSocket (404). The app sees the route prefix as
`root_path`, as for HTTP, and the handshake's answer carries `x-request-id`.

Draining (scale-down, rolling update, SIGTERM): every open WebSocket is
closed with 1001 (going away) at once, so that its client reconnects to a
replica that is staying. The app's `receive()` then says disconnect (1001);
a message it sends after that raises as it would for a client that left
(uvicorn's ClientDisconnected, which Starlette turns into WebSocketDisconnect).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.utils import ClientDisconnected

from servefleet._private import envelope
from servefleet._private.edge.ws import GOING_AWAY, deny
from servefleet._private.observability.logs import REQUEST_ID
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import REJECTED_HEADER, REQUEST_ID_HEADER

from .answers import refusal_status
from .user_calls import traced

if TYPE_CHECKING:
    from .loader import UserDeployment
    from .metrics import ReplicaMetrics

logger = logging.getLogger(__name__)


class _Admission(Protocol):
    ongoing: int

    def refusal(self, websocket: bool = False) -> str | None: ...


class SocketHost(Protocol):
    """What a WebSocket needs of the replica's app (http.ReplicaApp, which
    imports this module: a protocol, not an import of it)."""

    @property
    def admission(self) -> _Admission: ...

    @property
    def metrics(self) -> ReplicaMetrics: ...

    @property
    def replica_id(self) -> str: ...

    @property
    def deployment(self) -> UserDeployment | None: ...

    @property
    def span_attributes(self) -> dict[str, str]: ...

    @property
    def websockets(self) -> OpenSockets: ...


class OpenSocket:
    """One WebSocket's `send`, as the app gets it: it marks the answer with the
    request id, and knows whether the socket is open (for draining)."""

    __slots__ = ("_request_id", "_send", "accepted", "closed", "left")

    def __init__(self, send: Send, request_id: str) -> None:
        self._send, self._request_id = send, request_id
        self.accepted = self.closed = self.left = False

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if self.left:  # closed by draining: as if the client had gone
            if kind == "websocket.close":
                return
            raise ClientDisconnected()
        if kind == "websocket.accept":
            headers = [h for h in message.get("headers", []) if h[0] != REQUEST_ID_HEADER]
            request_id = self._request_id.encode("latin-1")  # as it came
            message = {**message, "headers": [*headers, (REQUEST_ID_HEADER, request_id)]}
            self.accepted = True
        elif kind == "websocket.close":
            self.closed = True
        await self._send(message)

    async def go_away(self) -> None:
        """Close with 1001, if open; the app's receive() then says disconnect."""
        if self.accepted and not self.closed and not self.left:
            self.left = True
            try:
                await self._send({"type": "websocket.close", "code": GOING_AWAY,
                                  "reason": "replica draining"})
            except (OSError, RuntimeError):
                pass  # the client left meanwhile


class OpenSockets:
    """The replica's open WebSockets."""

    def __init__(self) -> None:
        self.open: set[OpenSocket] = set()

    async def close_all(self) -> None:
        if self.open:
            logger.info("draining: closing %d WebSockets with 1001", len(self.open))
        for socket in list(self.open):
            await socket.go_away()


async def serve_websocket(app: SocketHost, scope: Scope, receive: Receive, send: Send) -> None:
    """One WebSocket, start to end; `scope` with the route prefix as root_path."""
    reason = app.admission.refusal(websocket=True)
    if reason is not None:
        app.metrics.rejected[reason].inc()
        await deny(scope, send, refusal_status(scope), f"replica {app.replica_id} is {reason}",
                   [(REJECTED_HEADER, reason.encode())])
        return
    deployment = app.deployment
    assert deployment is not None, "admission lets requests in only once loaded"
    if not deployment.is_asgi:
        await deny(scope, send, 404, "this deployment serves no WebSocket: only an ASGI "
                   "ingress (Starlette, FastAPI) does")
        return
    request_id, trace_headers = envelope.of_scope(scope)  # scope: under the route prefix
    REQUEST_ID.set(request_id)
    served = tracing.serve(f"{app.metrics.deployment} WebSocket", trace_headers, {
        **app.span_attributes, "servefleet.request_id": request_id}, roots=False)
    socket = OpenSocket(send, request_id)
    app.admission.ongoing += 1
    app.websockets.open.add(socket)
    failed: Exception | None = None
    try:
        await traced(deployment.target(scope, receive, socket.send))
        app.metrics.ok.inc()
    except Exception as e:
        failed = e
        app.metrics.error.inc()
        logger.exception("request %s: WebSocket failed in user code", request_id)
        if not socket.accepted and not socket.closed:
            await _deny_quietly(scope, send, f"error in user code: {type(e).__name__}: {e}")
    finally:
        app.websockets.open.discard(socket)
        app.admission.ongoing -= 1
        if served is not None:
            served.finish(0, failed)


async def _deny_quietly(scope: Scope, send: Send, text: str) -> Any:
    try:
        await deny(scope, send, 500, text)
    except (OSError, RuntimeError):
        pass
