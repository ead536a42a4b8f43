"""The proxy -> replica hop: HTTP/1.1 over pooled keep-alive connections.

A small client on asyncio streams, for the one kind of server it talks to
(replicas: uvicorn). bench/data_plane.py chose it: through httpx the proxy
managed 260 requests/s at 16 connections, a tenth of what one replica
serves, and fell further as connections grew.

Failures are reported in the terms retrying needs (proxy/app.py):
`NotDelivered` when the replica cannot have acted on the request (the
connection was refused; or an idle keep-alive connection turned out closed
before any byte of an answer to an idempotent request), `UpstreamError` when
it may have.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator

IDEMPOTENT = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"}
MAX_HEAD_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024


class NotDelivered(Exception):
    """The replica did not take the request: another may."""


class UpstreamError(Exception):
    """The exchange failed after the replica may have acted on the request."""


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


class Response:
    def __init__(self, pool: UpstreamPool, address: str, conn: Connection, status: int,
                 headers: list[tuple[bytes, bytes]]) -> None:
        self._pool, self._address, self._conn = pool, address, conn
        self.status = status
        self.headers = headers
        self._keep_alive = True
        self._done = False
        lengths = [v for k, v in headers if k == b"content-length"]
        self._length = int(lengths[0]) if lengths else None
        self._chunked = any(k == b"transfer-encoding" and b"chunked" in v.lower()
                            for k, v in headers)
        if any(k == b"connection" and v.lower() == b"close" for k, v in headers) or (
                self._length is None and not self._chunked):
            self._keep_alive = False

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece, as the replica sends it (de-chunked)."""
        reader = self._conn.reader
        try:
            if self._chunked:
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    size = int(size_line.split(b";")[0].strip(), 16)
                    if size == 0:
                        await reader.readuntil(b"\r\n")  # end of (no) trailers
                        break
                    yield await reader.readexactly(size)
                    await reader.readexactly(2)
            elif self._length is not None:
                left = self._length
                while left:
                    piece = await reader.read(min(left, READ_CHUNK))
                    if not piece:
                        raise asyncio.IncompleteReadError(b"", left)
                    left -= len(piece)
                    yield piece
            else:
                while piece := await reader.read(READ_CHUNK):
                    yield piece
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError) as e:
            self._keep_alive = False
            raise UpstreamError(f"replica failed mid-response: {e!r}") from None
        self._done = True

    def release(self) -> None:
        """Give the connection back (kept alive only after a complete response)."""
        if self._done and self._keep_alive:
            self._pool.put_back(self._address, self._conn)
        else:
            self._conn.close()


class UpstreamPool:
    def __init__(self, max_idle_per_replica: int = 256) -> None:
        self._idle: dict[str, list[Connection]] = defaultdict(list)
        self._max_idle = max_idle_per_replica

    def put_back(self, address: str, conn: Connection) -> None:
        idle = self._idle[address]
        if len(idle) < self._max_idle and not conn.writer.is_closing():
            conn.reused = True
            idle.append(conn)
        else:
            conn.close()

    async def _connect(self, address: str) -> Connection:
        idle = self._idle.get(address)
        while idle:
            conn = idle.pop()
            if not conn.writer.is_closing() and not conn.reader.at_eof():
                return conn
            conn.close()
        host, _, port = address.rpartition(":")
        try:
            reader, writer = await asyncio.open_connection(host, int(port),
                                                           limit=MAX_HEAD_BYTES)
        except OSError as e:
            raise NotDelivered(f"connection refused: {e}") from None
        return Connection(reader, writer)

    async def request(self, address: str, method: str, target: str,
                      headers: list[tuple[bytes, bytes]], body: bytes) -> Response:
        conn = await self._connect(address)
        head = [f"{method} {target} HTTP/1.1\r\nhost: {address}\r\n".encode()]
        head.extend(k + b": " + v + b"\r\n" for k, v in headers)
        head.append(f"content-length: {len(body)}\r\n\r\n".encode())
        try:
            conn.writer.write(b"".join(head) + body)
            await conn.writer.drain()
            raw = await conn.reader.readuntil(b"\r\n\r\n")
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as e:
            conn.close()
            received = isinstance(e, asyncio.IncompleteReadError) and bool(e.partial)
            if conn.reused and not received and method in IDEMPOTENT:
                raise NotDelivered(f"kept-alive connection closed: {e!r}") from None
            raise UpstreamError(f"replica failed before answering: {e!r}") from None
        lines = raw.split(b"\r\n")
        try:
            status = int(lines[0].split(b" ", 2)[1])
        except (IndexError, ValueError):
            conn.close()
            raise UpstreamError(f"bad status line {lines[0][:80]!r}") from None
        parsed = []
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(b":")
                parsed.append((name.strip().lower(), value.strip()))
        return Response(self, address, conn, status, parsed)

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
