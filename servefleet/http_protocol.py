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
(disconnect.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .disconnect import SCOPE_KEY, ConnectionHook


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

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """Also puts the connection's ConnectionHook in each request's scope
    (disconnect.py): apps learn of a lost client without a task per request."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.connection_hook = ConnectionHook()
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[SCOPE_KEY] = self.connection_hook  # type: ignore[literal-required]

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.connection_hook.lose()
