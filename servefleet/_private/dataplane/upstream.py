"""The proxy -> replica hop: HTTP/1.1 over pooled keep-alive connections.

A small client for the one kind of server it talks to (replicas: uvicorn),
over connections of its own (connection.py). bench/data_plane.py chose it:
through httpx the proxy managed 260 requests/s at 16 connections, a tenth
of what one replica serves, and fell further as connections grew.

Failures are reported in the terms retrying needs (forward.py):
`NotDelivered` when the replica cannot have acted on the request (the
connection was refused; or an idle keep-alive connection turned out closed
before any byte of an answer to an idempotent request), `UpstreamError` when
it may have.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
from collections import defaultdict
from collections.abc import AsyncIterator

from servefleet._private.security.hop_client import HOP_PASS
from servefleet._private.security.hop_tls import REPLICA_SERVER_NAME

from .body import StreamedBody, replayable
from .connection import Connection, Incomplete, TooLong

IDEMPOTENT = {"GET", "HEAD", "OPTIONS", "PUT", "DELETE"}
MAX_HEAD_BYTES = 64 * 1024
MAX_IDLE_S = 4.0
CONNECT_TIMEOUT_S = 5.0
READ_CHUNK = 64 * 1024


class NotDelivered(Exception):
    """The replica did not take the request: another may."""

    def __init__(self, message: str, refused: bool = False) -> None:
        super().__init__(message)
        # No connection could be made: the replica is likely gone.
        self.refused = refused


class UpstreamError(Exception):
    """The exchange failed after the replica may have acted on the request."""

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(message)
        # The replica's address, when known.
        self.address = address


class Response:
    def __init__(self, pool: UpstreamPool, address: str, conn: Connection, status: int,
                 headers: list[tuple[bytes, bytes]], method: str = "GET",
                 raw_head: bytes = b"") -> None:
        self._pool, self._address, self._conn = pool, address, conn
        self.status = status
        self.headers = headers
        # The status line and headers as the replica sent them, with the empty line.
        self.raw_head = raw_head
        self._keep_alive = True
        self._done = False
        self._length: int | None = None
        self._chunked = False
        for name, value in headers:
            if name == b"content-length" and self._length is None:
                self._length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                self._chunked = True
            elif name == b"connection" and value.lower() == b"close":
                self._keep_alive = False
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._length, self._chunked = 0, False  # no body, whatever the headers say
        if self._length is None and not self._chunked:
            self._keep_alive = False

    def header(self, name: bytes) -> bytes | None:
        return next((v for k, v in self.headers if k == name), None)

    def buffered_body(self) -> bytes | None:
        """The whole body when it has already arrived (most small answers do,
        with their head), else None; then read it with `chunks`."""
        length = self._length
        if self._chunked or length is None or len(self._conn.buffer) < length:
            return None
        self._done = True
        return self._conn.take(length) if length else b""

    async def read(self) -> bytes:
        """The whole body."""
        body = self.buffered_body()
        if body is None:
            body = b"".join([chunk async for chunk in self.chunks()])
        return body

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece, as the replica sends it (de-chunked)."""
        conn = self._conn
        try:
            if self._chunked:
                while True:
                    size_line = await conn.read_until(b"\r\n", MAX_HEAD_BYTES)
                    size = int(size_line.split(b";")[0].strip(), 16)
                    if size == 0:
                        while await conn.read_until(b"\r\n", MAX_HEAD_BYTES) != b"\r\n":
                            pass  # trailers, up to the empty line
                        break
                    left = size
                    while left:
                        piece = await conn.read_some(min(left, READ_CHUNK))
                        if not piece:
                            raise Incomplete(partial=True)
                        left -= len(piece)
                        yield piece
                    if await conn.read_exactly(2) != b"\r\n":
                        raise ValueError("chunk not followed by CRLF")
            elif self._length is not None:
                left = self._length
                while left:
                    piece = await conn.read_some(min(left, READ_CHUNK))
                    if not piece:
                        raise Incomplete(partial=True)
                    left -= len(piece)
                    yield piece
            else:
                while piece := await conn.read_some(READ_CHUNK):
                    yield piece
        except (OSError, Incomplete, TooLong, ValueError) as e:
            self._keep_alive = False
            raise UpstreamError(f"replica failed mid-response: {e!r}", self._address) from None
        self._done = True

    def release(self) -> None:
        """Give the connection back (kept alive only after a complete response)."""
        if self._done and self._keep_alive:
            self._pool.put_back(self._address, self._conn)
        else:
            self._conn.close()


def _parse_head(raw: bytes, address: str) -> tuple[int, list[tuple[bytes, bytes]]]:
    crlf = raw.count(b"\r\n")
    if raw.count(b"\n") != crlf or raw.count(b"\r") != crlf:
        # Where this parser sees one header, a client might see two: refused,
        # as the head may go to the client as it is (proxy/answers.py).
        raise UpstreamError("a lone CR or LF in the answer's head", address)
    lines = raw.split(b"\r\n")
    try:
        status = int(lines[0].split(b" ", 2)[1])
    except (IndexError, ValueError):
        raise UpstreamError(f"bad status line {lines[0][:80]!r}", address) from None
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(b":")
            headers.append((name.strip().lower(), value.strip()))
    return status, headers


class UpstreamPool:
    def __init__(self, max_idle_per_replica: int = 256,
                 tls: ssl.SSLContext | None = None) -> None:
        self._idle: dict[str, list[Connection]] = defaultdict(list)
        self._max_idle = max_idle_per_replica
        # For replicas that serve TLS (hop_tls.py): this process's client
        # context (None: it has no cluster certificate) and their addresses.
        self._tls = tls
        self._tls_addresses: set[str] = set()

    def serves_tls(self, address: str, tls: bool) -> None:
        """The replica at `address` serves TLS, or not (its Watch endpoint says)."""
        if tls:
            self._tls_addresses.add(address)
        else:
            self._tls_addresses.discard(address)

    def tls_for(self, address: str) -> ssl.SSLContext | None:
        """How to reach `address`: the TLS context, or None for plain text.
        NotDelivered when it serves TLS and this process has no certificate."""
        if address not in self._tls_addresses:
            return None
        if self._tls is None:
            raise NotDelivered(f"the replica at {address} serves TLS and this process has "
                               "no cluster certificate (--certs)", refused=True)
        return self._tls

    def put_back(self, address: str, conn: Connection) -> None:
        idle = self._idle[address]
        if len(idle) < self._max_idle and conn.usable:
            conn.reused = True
            conn.idle_since = time.monotonic()
            idle.append(conn)
        else:
            conn.close()

    def forget(self, address: str) -> None:
        """Close the idle connections to a replica that is gone."""
        self._tls_addresses.discard(address)
        for conn in self._idle.pop(address, []):
            conn.close()

    async def _connect(self, address: str) -> Connection:
        idle = self._idle.get(address)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            # Replicas (uvicorn) close idle connections after 5 s: older ones
            # are not worth the race.
            if now - conn.idle_since < MAX_IDLE_S and conn.usable:
                return conn
            conn.close()
        host, _, port = address.rpartition(":")
        tls = self.tls_for(address)
        try:
            _, conn = await asyncio.wait_for(
                asyncio.get_running_loop().create_connection(
                    Connection, host, int(port), ssl=tls,
                    server_hostname=REPLICA_SERVER_NAME if tls else None),
                CONNECT_TIMEOUT_S)
        except ssl.SSLError as e:
            raise NotDelivered(f"TLS handshake failed: {e}", refused=True) from None
        except (OSError, TimeoutError) as e:
            raise NotDelivered(f"connection refused: {e}", refused=True) from None
        return conn

    async def request(self, address: str, method: str, target: bytes,
                      headers: list[tuple[bytes, bytes]],
                      body: bytes | StreamedBody) -> Response:
        """Send one request; `target` is the raw path and query, as the client sent it.
        A `host` header first in `headers` is sent as the Host; else the replica's address.

        A StreamedBody is sent as it arrives (with the client's length, else
        chunked); BodyTooLarge and ClientGone from it pass through. A replica
        that answers before taking the whole body (and closes) is heard out.
        """
        if b"\r" in target or b"\n" in target or b" " in target:
            raise UpstreamError("refusing a request target with spaces or line breaks", address)
        if not HOP_PASS.ready:
            await HOP_PASS.wait_ready()
        conn = await self._connect(address)
        if headers and headers[0][0] == b"host":  # the client's, kept (proxy/app.py)
            head = [method.encode() + b" " + target + b" HTTP/1.1\r\n"]
        else:
            head = [method.encode() + b" " + target + b" HTTP/1.1\r\nhost: "
                    + address.encode() + b"\r\n"]
        head.extend(k + b": " + v + b"\r\n" for k, v in headers)
        if HOP_PASS.line:  # who this process is, to a replica of a cluster with credentials
            head.append(HOP_PASS.line)
        if isinstance(body, bytes):
            head.append(b"content-length: " + str(len(body)).encode() + b"\r\n\r\n")
        elif body.length is not None:
            head.append(b"content-length: " + str(body.length).encode() + b"\r\n\r\n")
        else:
            head.append(b"transfer-encoding: chunked\r\n\r\n")
        try:
            if isinstance(body, bytes):
                # At most body.BUFFER_BYTES: the transport holds what the replica
                # has not taken yet, and the answer is awaited below anyway.
                conn.write(b"".join(head) + body)
            else:
                conn.write(b"".join(head))
                with contextlib.suppress(OSError):  # an early answer may still be read below
                    await _send_streamed(conn, body)
            while True:
                raw = await conn.read_until(b"\r\n\r\n", MAX_HEAD_BYTES)
                status, parsed = _parse_head(raw, address)
                if not 100 <= status < 200 or status == 101:
                    break  # 1xx interim answers (100 Continue) come before the real one
            return Response(self, address, conn, status, parsed, method, raw)
        except (OSError, Incomplete, TooLong) as e:
            conn.close()
            received = isinstance(e, Incomplete) and e.partial
            if conn.reused and not received and method in IDEMPOTENT and replayable(body):
                raise NotDelivered(f"kept-alive connection closed: {e!r}") from None
            raise UpstreamError(f"replica failed before answering: {e!r}", address) from None
        except BaseException:  # cancelled, or a malformed answer: never reuse it
            conn.close()
            raise

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


async def _send_streamed(conn: Connection, body: StreamedBody) -> None:
    """Write the body as the client sends it, waiting for the replica to take each piece."""
    chunked = body.length is None
    async for chunk in body.chunks():
        conn.write(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
        await conn.drain()
    if chunked:
        conn.write(b"0\r\n\r\n")
        await conn.drain()
