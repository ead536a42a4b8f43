"""The proxy -> replica HTTP/1.1 client (servefleet/_private/dataplane/upstream.py)
against scripted loopback servers: framing, keep-alive, and how failures are
classified for retrying."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from servefleet._private.dataplane.body import StreamedBody
from servefleet._private.dataplane.upstream import (
    MAX_HEAD_BYTES,
    NotDelivered,
    Response,
    UpstreamError,
    UpstreamPool,
)
from servefleet._private.testing import free_port

# What a scripted server does with one request: the request's head and body in,
# the bytes to answer out (None: close without answering).
Script = Callable[[bytes, bytes], bytes | None]


class Server:
    def __init__(self, script: Script, close_after: bool = False) -> None:
        self.script = script
        self.close_after = close_after
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._on_connection, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _on_connection(self, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                body = await _read_request_body(reader, head)
                self.requests.append((head, body))
                answer = self.script(head, body)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def _read_request_body(reader: asyncio.StreamReader, head: bytes) -> bytes:
    lines = head.lower().split(b"\r\n")
    length = next((int(line.split(b":")[1]) for line in lines
                   if line.startswith(b"content-length:")), None)
    if length is not None:
        return await reader.readexactly(length)
    if b"transfer-encoding: chunked" not in lines:
        return b""
    body = b""
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        body += await reader.readexactly(size)
        await reader.readexactly(2)
    await reader.readexactly(2)
    return body


@pytest.fixture
async def serve() -> AsyncIterator[Callable]:
    servers: list[Server] = []

    async def start(script: Script, close_after: bool = False) -> tuple[Server, str]:
        server = Server(script, close_after)
        servers.append(server)
        return server, await server.start()

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
async def pool() -> AsyncIterator[UpstreamPool]:
    upstream = UpstreamPool()
    yield upstream
    upstream.close()


async def _exchange(pool: UpstreamPool, address: str, method: str = "GET",
                    body: bytes | StreamedBody = b"") -> tuple[Response, bytes]:
    response = await pool.request(address, method, b"/p?q=1", [(b"x-a", b"1")], body)
    try:
        data = b"".join([chunk async for chunk in response.chunks()])
    finally:
        response.release()
    return response, data


def _answer(status: bytes, headers: bytes = b"", body: bytes = b"") -> bytes:
    return b"HTTP/1.1 " + status + b"\r\n" + headers + b"\r\n" + body


def ok(body: bytes) -> bytes:
    return _answer(b"200 OK", b"content-length: %d\r\n" % len(body), body)


async def test_a_sized_answer_keeps_the_connection_for_the_next_request(serve, pool) -> None:
    server, address = await serve(lambda head, body: ok(b"echo:" + body))
    for i in range(3):
        response, data = await _exchange(pool, address, "POST", b"n%d" % i)
        assert (response.status, data) == (200, b"echo:n%d" % i)
    assert server.connections == 1
    head = server.requests[0][0]
    assert head.startswith(b"POST /p?q=1 HTTP/1.1\r\n") and b"\r\nx-a: 1\r\n" in head


async def test_a_chunked_answer_is_dechunked_and_its_trailers_skipped(serve, pool) -> None:
    chunked = _answer(b"200 OK", b"transfer-encoding: chunked\r\n",
                      b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nx-trailer: t\r\n\r\n")
    server, address = await serve(lambda head, body: chunked)
    for _ in range(2):
        response, data = await _exchange(pool, address)
        assert (response.status, data) == (200, b"abcde")
    assert server.connections == 1


async def test_an_answer_without_length_runs_to_the_close(serve, pool) -> None:
    server, address = await serve(lambda head, body: _answer(b"200 OK", b"", b"until-eof"),
                                  close_after=True)
    for _ in range(2):
        assert (await _exchange(pool, address))[1] == b"until-eof"
    assert server.connections == 2  # such a connection cannot be reused


async def test_interim_answers_are_skipped(serve, pool) -> None:
    _, address = await serve(lambda head, body: _answer(b"100 Continue") + ok(b"real"))
    response, data = await _exchange(pool, address, "POST", b"x")
    assert (response.status, data) == (200, b"real")


@pytest.mark.parametrize("method,status", [("HEAD", b"200 OK"), ("GET", b"204 No Content"),
                                           ("GET", b"304 Not Modified")])
async def test_answers_without_a_body_whatever_their_headers_say(serve, pool, method,
                                                                 status) -> None:
    server, address = await serve(lambda head, body: _answer(status, b"content-length: 7\r\n"))
    for _ in range(2):
        response, data = await _exchange(pool, address, method)
        assert data == b"" and response.header(b"content-length") == b"7"
    assert server.connections == 1


async def test_a_large_answer_arrives_whole_in_pieces(serve, pool) -> None:
    big = bytes(range(256)) * (16 * 1024)  # 4 MiB
    _, address = await serve(lambda head, body: ok(big))
    response = await pool.request(address, "GET", b"/", [], b"")
    pieces = [chunk async for chunk in response.chunks()]
    response.release()
    assert b"".join(pieces) == big and len(pieces) > 1


async def test_a_streamed_body_is_sent_chunked(serve, pool) -> None:
    messages = [{"type": "http.request", "body": b"rest", "more_body": False}]

    async def receive() -> dict:
        return messages.pop(0)

    server, address = await serve(lambda head, body: ok(b"got %d" % len(body)))
    body = StreamedBody(b"held-", receive, limit=1 << 20, length=None)
    _, data = await _exchange(pool, address, "POST", body)
    assert data == b"got 9" and server.requests[0][1] == b"held-rest"
    assert b"transfer-encoding: chunked" in server.requests[0][0]


async def test_refused_connections_are_not_delivered(pool) -> None:
    with pytest.raises(NotDelivered) as caught:
        await pool.request(f"127.0.0.1:{free_port()}", "POST", b"/", [], b"x")
    assert caught.value.refused


@pytest.mark.parametrize("method,delivered", [("GET", False), ("POST", True)])
async def test_a_kept_alive_connection_found_closed(serve, pool, method, delivered) -> None:
    """The replica closed an idle connection as the request went out: a GET
    may go to another replica, a POST may have been acted on."""
    calls = []

    def script(head: bytes, body: bytes) -> bytes | None:
        calls.append(head)
        return ok(b"first") if len(calls) == 1 else None  # the second: closed unanswered

    _, address = await serve(script)
    await _exchange(pool, address, method)
    expected = UpstreamError if delivered else NotDelivered
    with pytest.raises(expected):
        await _exchange(pool, address, method)


async def test_an_answer_cut_short_is_an_upstream_error(serve, pool) -> None:
    _, address = await serve(lambda head, body: _answer(b"200 OK", b"content-length: 9\r\n",
                                                        b"part"), close_after=True)
    with pytest.raises(UpstreamError, match="mid-response"):
        await _exchange(pool, address)


@pytest.mark.parametrize("answer", [b"garbage\r\n\r\n",
                                    _answer(b"200 OK", b"x-big: " + b"a" * MAX_HEAD_BYTES
                                            + b"\r\n")])
async def test_a_malformed_or_huge_head_is_an_upstream_error(serve, pool, answer) -> None:
    _, address = await serve(lambda head, body: answer, close_after=True)
    with pytest.raises(UpstreamError):
        await _exchange(pool, address)


async def test_a_cancelled_request_closes_its_connection(serve, pool) -> None:
    arrived = asyncio.Event()

    def script(head: bytes, body: bytes) -> bytes | None:
        arrived.set()
        return b""  # answers nothing, keeps the connection

    server, address = await serve(script)
    task = asyncio.create_task(pool.request(address, "GET", b"/", [], b""))
    await arrived.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    server.script = lambda head, body: ok(b"fresh")
    assert (await _exchange(pool, address))[1] == b"fresh"
    assert server.connections == 2
