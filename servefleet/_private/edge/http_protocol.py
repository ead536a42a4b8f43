"""uvicorn's HTTP protocol with writes coalesced: one send per response.

uvicorn writes a response's status line and headers when the app sends
`http.response.start`, and the body with each `http.response.body`: two
`send` system calls for a small answer, each of which on loopback also runs
the receiver's TCP processing. Profiles of the proxy and the replica under
load (bench/flame.py) put a quarter of the proxy's time in those writes.

Here the transport uvicorn writes to keeps what it is given during one pass
of the event loop and sends it all at the end of the pass (a `call_soon`),
so headers and a body written in one step of the app go out in one send.
Order is kept (everything goes through the one buffer), and closing sends
what is buffered first.

The protocol also hands each request its connection's disconnect hook
(disconnect.py), and a way to send a response that is already HTTP/1.1
bytes in one step (`RawResponse`, for the proxy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from servefleet._private.edge.disconnect import SCOPE_KEY, ConnectionHook


class CoalescingTransport:
    """A transport whose writes within one loop pass go out as one."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if self._pending is None:
            self._pending = [bytes(data)]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()  # what was written first goes first
        self._transport.write_eof()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


RAW_KEY = "servefleet.raw_response"


class RawResponse:
    """Sends a whole response the app already has as HTTP/1.1 bytes, past
    ASGI's `send`: the proxy passing on a replica's answer, whose head uvicorn
    would otherwise parse, check and write out again header by header (about
    a tenth of the proxy's time per request, bench/flame.py), and a replica's
    plain answers. One per connection, in each request's scope under RAW_KEY.

    The caller vouches for the head. In the proxy it is the replica's, which
    uvicorn wrote and checked there, and which the proxy's parser found to be
    CRLF lines only (answers with hop-by-hop headers are left out); in the
    replica, fixed headers and values checked to be printable.

    uvicorn's bookkeeping for the request is done as its `send` does it: the
    response is complete, `connection: close` is added and the connection
    closed when it is not kept alive, and the next pipelined request or the
    keep-alive timer starts."""

    __slots__ = ("_protocol", "sent")

    def __init__(self, protocol: HttpToolsProtocol) -> None:
        self._protocol: HttpToolsProtocol | None = protocol
        # Responses sent this way (tests check the fast path is taken).
        self.sent = 0

    def __call__(self, scope: Mapping[str, Any], head: bytes, body: bytes,
                 server_headers: bool = False) -> bool:
        """Send `head` (status line and headers, ending in an empty line) and
        `body` as the answer to `scope`; with `server_headers`, the server's
        own (date, server) are added after the status line, as `send` adds
        them. False, with nothing sent, when it must go through ASGI `send`
        instead: the answer has begun, the connection is lost or its writes
        are paused, or `scope` is not the request being answered now
        (pipelined requests)."""
        cycle = self._protocol.cycle if self._protocol is not None else None
        if (cycle is None or cycle.scope is not scope or cycle.response_started
                or cycle.disconnected or cycle.flow.write_paused):
            return False
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        if server_headers and cycle.default_headers:
            status_end = head.index(b"\r\n") + 2
            head = b"".join([head[:status_end], *(b"%s: %s\r\n" % header
                                                  for header in cycle.default_headers),
                             head[status_end:]])
        if not cycle.keep_alive:
            head = head[:-2] + b"connection: close\r\n\r\n"
        cycle.transport.write(head)
        if body and scope["method"] != "HEAD":
            cycle.transport.write(body)
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            cycle.transport.close()
        cycle.on_response()
        self.sent += 1
        return True

    def forget(self) -> None:
        self._protocol = None  # no cycle between the protocol and this once it is lost


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """Also puts the connection's ConnectionHook in each request's scope
    (disconnect.py): apps learn of a lost client without a task per request;
    and its RawResponse."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.connection_hook = ConnectionHook()
        self.raw_response = RawResponse(self)
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[SCOPE_KEY] = self.connection_hook  # type: ignore[literal-required]
        self.scope[RAW_KEY] = self.raw_response  # type: ignore[literal-required]

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.connection_hook.lose()
        self.raw_response.forget()
