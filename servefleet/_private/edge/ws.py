"""What the proxy's and the replica's WebSocket code share (proxy/websocket.py,
replica/websocket.py): refusing a handshake with an HTTP answer, and close codes."""

from __future__ import annotations

from starlette.types import Scope, Send

# The close code of an endpoint that is leaving (RFC 6455, 7.4.1): draining, idle.
GOING_AWAY = 1001
# Codes that describe a connection and may not be sent in a close frame.
NOT_SENDABLE = frozenset({1005, 1006, 1015})


async def deny(scope: Scope, send: Send, status: int, text: str,
               headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Refuse a handshake with an HTTP answer (ASGI's WebSocket denial
    response) where the server allows one, else with a close (403)."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": text[:120]})
        return
    await send({"type": "websocket.http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *(headers or [])]})
    await send({"type": "websocket.http.response.body", "body": text.encode()})
