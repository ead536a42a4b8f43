"""One keep-alive connection to a replica, as an asyncio protocol (upstream.py uses it).

Where asyncio's streams give each connection a reader, a writer and a
wake-up per `readuntil`, this keeps what arrives in one buffer and wakes
its one reader only when it waits for more: a small answer that arrives in
one segment (most of them) costs one wake-up, and its head and body are
taken straight from the buffer.

Flow control both ways: reading pauses while more than HIGH_WATER bytes
wait to be taken (a slow client downstream), and `drain` waits while the
transport's write buffer is full (a slow replica upstream).
"""

from __future__ import annotations

import asyncio
from typing import cast

HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024


class Incomplete(Exception):
    """The connection ended before what was asked for arrived."""

    def __init__(self, partial: bool) -> None:
        super().__init__("the replica closed the connection" + (" mid-message" if partial
                                                                 else ""))
        # Some bytes of the awaited message had arrived.
        self.partial = partial


class TooLong(Exception):
    """A line or head longer than its limit."""


class Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.ended = False  # the replica closed its side, or the connection was lost
        self.error: Exception | None = None
        self.reused = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._drained: asyncio.Future[None] | None = None

    # -- protocol callbacks ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # An asyncio.Transport in all but name under uvloop (no isinstance).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if len(self.buffer) > HIGH_WATER and not self._reading_paused and self.transport:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()
        self._resume_writer()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._resume_writer()

    # -- for the client ----------------------------------------------------------------

    @property
    def usable(self) -> bool:
        """Idle and open, with nothing unread (unread bytes mean a broken exchange)."""
        return (not self.ended and not self.buffer and self.transport is not None
                and not self.transport.is_closing())

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing() or self.ended:
            raise ConnectionResetError("the connection to the replica is closed")
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait while the replica is slower to take bytes than they are written."""
        if self._writing_paused and not self.ended:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained
        if self.ended:
            raise ConnectionResetError(f"the connection to the replica was lost: {self.error}")

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    async def read_until(self, separator: bytes, limit: int) -> bytes:
        """Bytes up to and including `separator`. Raises Incomplete, TooLong."""
        start = 0
        while True:
            found = self.buffer.find(separator, start)
            if found > limit or (found < 0 and len(self.buffer) > limit):
                raise TooLong(f"more than {limit} bytes before {separator!r}")
            if found >= 0:
                return self.take(found + len(separator))
            start = max(0, len(self.buffer) - len(separator) + 1)
            await self._more()

    async def read_some(self, most: int) -> bytes:
        """Up to `most` bytes, once any arrived; b"" when the connection ended."""
        while not self.buffer:
            if self.ended:
                return b""
            await self._more()
        return self.take(most)

    async def read_exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            if self.ended:
                raise Incomplete(partial=bool(self.buffer))
            await self._more()
        return self.take(count)

    def take(self, count: int) -> bytes:
        """Up to `count` buffered bytes, now."""
        if count >= len(self.buffer):
            data = bytes(self.buffer)
            self.buffer.clear()
        else:
            data = bytes(self.buffer[:count])
            del self.buffer[:count]
        if self._reading_paused and len(self.buffer) < LOW_WATER and self.transport:
            self._reading_paused = False
            self.transport.resume_reading()
        return data

    async def _more(self) -> None:
        if self.ended:
            raise Incomplete(partial=bool(self.buffer))
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _resume_writer(self) -> None:
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)
        self._drained = None
