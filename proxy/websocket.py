"""WebSockets through the proxy: the handshake goes to a replica, then
messages are relayed both ways until one side closes.

A WebSocket is one ongoing request at its replica for as long as it is open:
the deployment's pool (balancer.py) gives a replica with room, and the
handshake queues for one as an HTTP request would (past
`max_queued_requests`: refused with 503). The proxy opens the WebSocket to
that replica with the client's path, query, subprotocols and headers (plus
`x-request-id` and the route prefix, as for HTTP) and accepts the client with
what the replica accepted: its subprotocol and its extra headers. A handshake
the replica refused unread (503 with `x-servefleet-rejected`: loading,
draining, full) or could not take (connection refused) goes to another
replica, as an HTTP request does (dataplane/forward.py's `set_aside`): a
replica that refused the connection or is draining is set aside until the
next replica set at no attempt's cost, and with no other to try the
handshake waits for that set (a proxy that has not heard of a rollout's
new replicas yet, cut off from the controllers, say); the others' refusals
count, up to MAX_ATTEMPTS. Any other refusal reaches the client as it came
(status, headers, body), through ASGI's WebSocket denial response.

Then text and binary messages go both ways as they come, and the close code
and reason of the side that closes first go to the other. Pings are answered
on each hop (ASGI carries no ping frames): the client's by the proxy, the
proxy's by the replica. A client that disappears (1006) closes the replica
side with 1001 at once; a replica that goes away closes the client with
1011. No message either way for `idle_timeout_s` (0: no limit; not the
request timeout) closes both with 1001, as does the proxy draining.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge
from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from servefleet._private.dataplane.balancer import (
    Overloaded,
    QueueFull,
    ReplicaPool,
    Unservable,
)
from servefleet._private.dataplane.forward import MAX_ATTEMPTS, set_aside
from servefleet._private.dataplane.upstream import NotDelivered
from servefleet._private.edge.ws import GOING_AWAY, NOT_SENDABLE, deny
from servefleet._private.security.hop_client import HOP_PASS
from servefleet._private.security.hop_tls import REPLICA_SERVER_NAME
from servefleet._private.wire import REJECTED_HEADER

from .routes import DEFAULT_ANSWER_START_S

logger = logging.getLogger(__name__)

OPEN = Gauge("servefleet_proxy_websockets_open", "WebSockets open through the proxy",
             ["application", "deployment"], multiprocess_mode="livesum")
MESSAGES = Counter("servefleet_proxy_websocket_messages", "WebSocket messages relayed",
                   ["application", "deployment", "direction"])
# Set by the WebSocket handshake itself, or this proxy's to say.
_NOT_SENT_UP = {b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions",
                b"sec-websocket-protocol", b"origin"}
_NOT_SENT_DOWN = {"upgrade", "connection", "sec-websocket-accept", "sec-websocket-extensions",
                  "sec-websocket-protocol", "date", "server", "content-length"}


class Denied(Exception):
    """The handshake is refused with this HTTP answer."""

    def __init__(self, status: int, text: str,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(text)
        self.status, self.text, self.headers = status, text, headers or []


class Relay:
    """One WebSocket's two halves: the client's (ASGI) and the replica's."""

    def __init__(self, key: tuple[str, str], upstream: ClientConnection, receive: Receive,
                 send: Send, idle_timeout_s: float) -> None:
        self.key = key
        self.upstream = upstream
        self._receive, self._send = receive, send
        self._idle_timeout_s = idle_timeout_s
        self._last = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._closer: asyncio.Future[None] | None = None  # the idle timer's close
        self._up = MESSAGES.labels(*key, "to_replica")
        self._down = MESSAGES.labels(*key, "to_client")

    async def run(self) -> None:
        if self._idle_timeout_s > 0:
            self._timer = asyncio.get_running_loop().call_later(self._idle_timeout_s,
                                                                self._check_idle)
        down = asyncio.create_task(self._replica_to_client())
        try:
            await self._client_to_replica()
            await asyncio.wait({down}, timeout=self.upstream.close_timeout)
        finally:
            if self._timer is not None:
                self._timer.cancel()
            down.cancel()
            await self.upstream.close(GOING_AWAY)  # a no-op once closed

    async def _client_to_replica(self) -> None:
        while True:
            message = await self._receive()
            kind = message["type"]
            if kind == "websocket.receive":
                self._last = time.monotonic()
                text = message.get("text")
                try:
                    await self.upstream.send(text if text is not None else message["bytes"])
                except ConnectionClosed:
                    continue  # the replica closed: its close reaches the client, then ours ends
                self._up.inc()
            elif kind == "websocket.disconnect":
                code = message.get("code", 1000)
                await self.upstream.close(GOING_AWAY if code in NOT_SENDABLE else code,
                                          message.get("reason") or "")
                return

    async def _replica_to_client(self) -> None:
        try:
            async for data in self.upstream:
                self._last = time.monotonic()
                await self._send({"type": "websocket.send", "text": data} if isinstance(data, str)
                                 else {"type": "websocket.send", "bytes": data})
                self._down.inc()
        except ConnectionClosed:
            pass
        except (OSError, RuntimeError):
            return  # the client is gone or closed: the other half closes the replica's side
        received = self.upstream.close_code
        code = 1011 if received is None or received in NOT_SENDABLE else received
        reason = self.upstream.close_reason if code == received else "the replica went away"
        with contextlib.suppress(OSError, RuntimeError):  # the client may be gone or closed
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def close(self, code: int = GOING_AWAY, reason: str = "") -> None:
        """Close both sides (draining, idle): the client's at once, and the
        replica's with the same code as the client's disconnect comes back."""
        if not self._closing:
            self._closing = True
            with contextlib.suppress(OSError, RuntimeError):  # the client is gone or closed
                await self._send({"type": "websocket.close", "code": code, "reason": reason})

    def _check_idle(self) -> None:
        idle = time.monotonic() - self._last
        if idle >= self._idle_timeout_s:
            logger.info("%s/%s: WebSocket idle for %.0f s: closing", *self.key, idle)
            self._closer = asyncio.ensure_future(self.close(GOING_AWAY, "idle"))
            return
        self._timer = asyncio.get_running_loop().call_later(self._idle_timeout_s - idle,
                                                            self._check_idle)


async def open_upstream(pool: ReplicaPool, scope: Scope, headers: list[tuple[bytes, bytes]],
                        target: bytes, timeout_s: float | None, request_id: str,
                        tls_for: Callable[[str], ssl.SSLContext | None] = lambda _a: None
                        ) -> tuple[Any, ClientConnection]:
    """(the replica, its WebSocket): the first replica of the pool that accepts
    the handshake, its slot held. Denied when none did, or one refused it."""
    up_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers
                  if k not in _NOT_SENT_UP]
    up_headers.extend(HOP_PASS.metadata)  # this proxy, to a replica of a cluster with credentials
    origin = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"origin"), None)
    tried: set[str] = set()
    attempt = spent = 0
    while spent < MAX_ATTEMPTS:
        attempt += 1
        replica = await pool.acquire(exclude=tried)
        try:
            tls = tls_for(replica.address)
            upstream = await connect(
                f"{'wss' if tls else 'ws'}://{replica.address}{target.decode('latin-1')}",
                ssl=tls, server_hostname=REPLICA_SERVER_NAME if tls else None, origin=origin,
                subprotocols=scope.get("subprotocols") or None, additional_headers=up_headers,
                compression=None, user_agent_header=None, proxy=None, open_timeout=timeout_s,
                ping_interval=None, max_size=None, close_timeout=2)
            return replica, upstream
        except InvalidStatus as e:
            pool.release(replica)
            response = e.response
            reason = response.headers.get(REJECTED_HEADER.decode())
            if response.status_code == 503 and reason:
                spent += set_aside(pool, replica, tried, reason if reason in (
                    "overloaded", "loading", "draining") else "rejected")
                logger.info("WebSocket %s not taken by %s (%s); attempt %d", request_id,
                            replica.replica_id, reason, attempt)
                continue
            passed = [(k.lower().encode("latin-1"), v.encode("latin-1"))
                      for k, v in response.headers.raw_items()
                      if k.lower() not in _NOT_SENT_DOWN and k.lower() != "content-type"]
            raise Denied(response.status_code, response.body.decode(errors="replace"),
                         passed) from None
        except (OSError, NotDelivered) as e:  # (ssl.SSLError is an OSError)
            pool.release(replica)
            spent += set_aside(pool, replica, tried, "refused")
            logger.info("WebSocket %s: %s unreachable (%s); attempt %d", request_id,
                        replica.replica_id, e, attempt)
        except BaseException:
            pool.release(replica)
            raise
    raise Denied(503, f"no replica took the WebSocket after {MAX_ATTEMPTS} attempts")


def accept_message(upstream: ClientConnection, request_id: str) -> dict[str, Any]:
    """The client's `websocket.accept`: the replica's subprotocol and headers."""
    response = upstream.response
    assert response is not None
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1"))
               for k, v in response.headers.raw_items() if k.lower() not in _NOT_SENT_DOWN]
    if not any(k == b"x-request-id" for k, _ in headers):
        headers.append((b"x-request-id", request_id.encode("latin-1")))
    return {"type": "websocket.accept", "subprotocol": upstream.subprotocol, "headers": headers}


class WebSockets:
    """The proxy's WebSockets: each handshake, then its relay while open."""

    def __init__(self, idle_timeout_s: float = 0.0,
                 tls_for: Callable[[str], ssl.SSLContext | None] = lambda _address: None
                 ) -> None:
        self.idle_timeout_s = idle_timeout_s
        # How to reach a replica: TLS or not (UpstreamPool.tls_for).
        self.tls_for = tls_for
        # Without a request timeout, the bound on the handshake.
        self.answer_start_s = DEFAULT_ANSWER_START_S
        self.open: set[Relay] = set()

    async def close_all(self) -> None:
        """The proxy drains: every WebSocket is closed with 1001 (going away),
        so that clients reconnect through another proxy."""
        for relay in list(self.open):
            await relay.close(GOING_AWAY, "proxy draining")

    async def serve(self, scope: Scope, receive: Receive, send: Send, pool: ReplicaPool,
                    headers: list[tuple[bytes, bytes]], target: bytes,
                    timeout_s: float | None, request_id: str) -> None:
        """Relay one WebSocket; the handshake (its wait for a replica with room
        included) may take `timeout_s` (None: DEFAULT_ANSWER_START_S)."""
        if (await receive())["type"] != "websocket.connect":
            return
        timeout_s = timeout_s or self.answer_start_s
        try:
            async with asyncio.timeout(timeout_s):
                replica, upstream = await open_upstream(pool, scope, headers, target,
                                                        timeout_s, request_id, self.tls_for)
        except Denied as e:
            await deny(scope, send, e.status, e.text, e.headers)
            return
        except Unservable as e:
            await deny(scope, send, 503, str(e))
            return
        except QueueFull as e:  # as the deployment's backpressure_config says
            await deny(scope, send, pool.backpressure.status,
                       f"{pool.key[1]} is overloaded: {e}", list(pool.backpressure.headers()))
            return
        except Overloaded as e:
            await deny(scope, send, 503, f"{pool.key[1]} is overloaded: {e}")
            return
        except TimeoutError:
            await deny(scope, send, 504, f"no replica took the WebSocket within {timeout_s:g}s")
            return
        relay = Relay(pool.key, upstream, receive, send, self.idle_timeout_s)
        gauge = OPEN.labels(*pool.key)
        try:
            await send(accept_message(upstream, request_id))
            self.open.add(relay)
            gauge.inc()
            await relay.run()
        except OSError:
            logger.info("WebSocket %s: the client left during the handshake", request_id)
        finally:
            if relay in self.open:
                self.open.discard(relay)
                gauge.dec()
            await upstream.close(GOING_AWAY)
            pool.release(replica)
