"""The proxy passes a replica's whole answer on as the replica's bytes
(http_protocol.RawResponse) and keeps HTTP/1.1 right while doing it:
keep-alive, `Connection: close` and HTTP/1.0 clients, HEAD, pipelined
requests; answers with headers the proxy must drop take the ASGI path.
A replica sends its plain answers the same way, with the headers `send`
would give them.

In one process: servefleet's HTTP server running the proxy's app, in front
of a scripted replica that answers each path with fixed bytes, and clients
on raw sockets, so every byte the client gets is checked."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from servefleet._private.batching import multiplex
from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.dataplane.upstream import UpstreamPool
from servefleet._private.lifecycle import HttpServer, start_http_server
from servefleet.proxy.app import ProxyApp
from servefleet.proxy.routes import RouteTable, Target
from servefleet.replica import loader
from servefleet.replica.http import Admission, ReplicaApp

PLAIN = (b"HTTP/1.1 200 OK\r\ndate: Fri, 04 Dec 2026 12:00:00 GMT\r\nserver: uvicorn\r\n"
         b"content-length: 5\r\ncontent-type: text/plain\r\nX-Mixed-Case: kept\r\n\r\nhello")
# Answers the proxy must not pass on as they are.
HOP = (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nkeep-alive: timeout=5\r\n"
       b"x-secret: 1\r\nconnection: x-secret\r\n\r\nok")
MODELS = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-servefleet-models: m1\r\n\r\nok"
CHUNKED = (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
           b"3\r\nabc\r\n0\r\n\r\n")
# A lone LF: one header to the proxy's parser, perhaps two to a client.
SMUGGLED = (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\ntransfer-encoding: chunked"
            b"\r\n\r\nok")
ANSWERS = {b"/plain": PLAIN, b"/hop": HOP, b"/models": MODELS, b"/chunked": CHUNKED,
           b"/smuggled": SMUGGLED}


async def scripted_replica(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request on the connection with ANSWERS[path] (HEAD: the head only)."""
    try:
        while head := await reader.readuntil(b"\r\n\r\n"):
            method, path = head.split(b" ")[:2]
            answer = ANSWERS[path]
            writer.write(answer.split(b"\r\n\r\n")[0] + b"\r\n\r\n" if method == b"HEAD"
                         else answer)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass  # the proxy closed the connection, or the test is over
    finally:
        writer.close()


class Proxy:
    def __init__(self, server: HttpServer, port: int) -> None:
        self.server, self.port = server, port
        self.last_raw_sent = 0

    @property
    def raw_sent(self) -> int:
        """Answers that went out by RawResponse, over the connections open now."""
        return sum(p.raw_response.sent for p in self.server.server_state.connections)

    async def exchange(self, *requests: bytes, answers: int = 1) -> tuple[bytes, bool]:
        """What the proxy sends back on one connection: each of `requests` is
        sent once `answers` answers to the one before have come whole. And
        whether the proxy then closed the connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        got = b""
        for request in requests:
            writer.write(request)
            expected = got.count(b"HTTP/1.1 ") + answers
            while (got.count(b"HTTP/1.1 ") < expected
                   or not _whole(got, request.startswith(b"HEAD"))):
                piece = await asyncio.wait_for(reader.read(65536), 5)
                if not piece:
                    break
                got += piece
        # Counted while the connection is open (its RawResponse goes with it).
        self.last_raw_sent = self.raw_sent
        try:
            closed = await asyncio.wait_for(reader.read(1), 0.3) == b""
        except TimeoutError:
            closed = False
        writer.close()
        return got, closed


def _whole(data: bytes, head_only: bool) -> bool:
    """Whether the last answer in `data` has come whole."""
    head, sep, body = data.rpartition(b"HTTP/1.1 ")[2].partition(b"\r\n\r\n")
    if not sep or head_only:
        return bool(sep)
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), None)
    return body.endswith(b"0\r\n\r\n") if length is None else len(body) >= length


async def serve(app: object, **options: Any) -> Proxy:
    server = await start_http_server(app, "127.0.0.1", 0, **options)
    return Proxy(server, server.servers[0].sockets[0].getsockname()[1])


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    replica = await asyncio.start_server(scripted_replica, "127.0.0.1", 0)
    replica_port = replica.sockets[0].getsockname()[1]
    pool = ReplicaPool()
    pool.update([("r1", f"127.0.0.1:{replica_port}")], max_ongoing=10, max_queued=-1)
    routes = RouteTable([Target("/", "app", "d")])
    upstream = UpstreamPool()
    app = ProxyApp(lambda application, deployment: pool, lambda: routes, upstream)
    served = await serve(app, date_header=False, server_header=False)
    yield served
    await served.server.shutdown()
    upstream.close()
    replica.close()


GET = b"GET /plain HTTP/1.1\r\nhost: x\r\n\r\n"


async def test_an_answer_goes_on_as_the_replicas_bytes_and_the_connection_stays(
        proxy: Proxy) -> None:
    got, closed = await proxy.exchange(GET, GET)
    assert got == PLAIN + PLAIN and not closed
    assert proxy.last_raw_sent == 2


async def test_pipelined_requests_are_answered_in_order(proxy: Proxy) -> None:
    """The first answer goes the ASGI way (the protocol is already on the
    second request); the bytes differ only in the case of header names."""
    got, closed = await proxy.exchange(GET + GET.replace(b"/plain", b"/models") + GET,
                                       answers=3)
    assert got.lower() == (PLAIN + b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                           + PLAIN).lower()
    assert not closed and proxy.last_raw_sent == 1


async def test_a_client_that_closes_gets_connection_close_then_the_close(proxy: Proxy) -> None:
    got, closed = await proxy.exchange(b"GET /plain HTTP/1.1\r\nhost: x\r\n"
                                       b"connection: close\r\n\r\n")
    head, body = got.split(b"\r\n\r\n")
    # The replica's bytes (the ASGI way would have lowercased X-Mixed-Case).
    assert head.endswith(b"X-Mixed-Case: kept\r\nconnection: close") and body == b"hello"
    assert closed


async def test_an_http_1_0_client_is_not_kept_alive(proxy: Proxy) -> None:
    got, closed = await proxy.exchange(b"GET /plain HTTP/1.0\r\n\r\n")
    assert b"connection: close\r\n" in got and got.endswith(b"\r\n\r\nhello") and closed


async def test_head_gets_the_head_alone(proxy: Proxy) -> None:
    got, closed = await proxy.exchange(b"HEAD /plain HTTP/1.1\r\nhost: x\r\n\r\n", GET)
    assert got == PLAIN.split(b"hello")[0] + PLAIN and not closed
    assert proxy.last_raw_sent == 2


@pytest.mark.parametrize("path", [b"/hop", b"/models"])
async def test_answers_with_headers_to_drop_go_the_asgi_way(proxy: Proxy, path: bytes) -> None:
    got, _ = await proxy.exchange(b"GET " + path + b" HTTP/1.1\r\nhost: x\r\n\r\n")
    head = got.split(b"\r\n\r\n")[0].lower()
    assert got.startswith(b"HTTP/1.1 200 OK\r\n") and got.endswith(b"\r\n\r\nok")
    for dropped in (b"keep-alive:", b"x-secret:", b"connection:", b"x-servefleet-models:"):
        assert dropped not in head
    assert proxy.last_raw_sent == 0


async def test_a_chunked_answer_streams_the_asgi_way(proxy: Proxy) -> None:
    got, closed = await proxy.exchange(b"GET /chunked HTTP/1.1\r\nhost: x\r\n\r\n")
    assert got.endswith(b"\r\n\r\n3\r\nabc\r\n0\r\n\r\n") and not closed
    assert proxy.last_raw_sent == 0


async def answer(request):
    return {"json": [1, 2]} if request.query_params.get("kind") == "json" else "hello"


async def test_a_replicas_plain_answers_carry_what_send_would_give_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multiplex, "_caches", [])  # no models held (other tests load some)
    admission = Admission(5)
    app = ReplicaApp(admission, concurrent.futures.ThreadPoolExecutor(1), "r1")
    app.deployment = loader.build(answer, [], {}, False)
    admission.ready = True
    replica = await serve(app)  # with the server's date and server headers
    try:
        got, closed = await replica.exchange(
            b"GET / HTTP/1.1\r\nhost: x\r\nx-request-id: id-1\r\n\r\n",
            b"GET /?kind=json HTTP/1.1\r\nhost: x\r\nx-request-id: id-\xe9\r\n\r\n")
        assert replica.last_raw_sent == 2 and not closed
        # A replica holding models says which: that answer goes the ASGI way.
        monkeypatch.setattr(multiplex, "_caches", [SimpleNamespace(models={"m1": None})])
        with_models, _ = await replica.exchange(
            b"GET / HTTP/1.1\r\nhost: x\r\nx-request-id: m-\xe9\r\n\r\n")
        assert b"\r\nx-servefleet-models: m1\r\n" in with_models
        assert b"\r\nx-request-id: m-\xe9\r\n" in with_models  # the id's bytes, as sent
        assert with_models.endswith(b"\r\n\r\nhello")
    finally:
        await replica.server.shutdown()
    text, json_answer = (b"HTTP/1.1 " + a for a in got.split(b"HTTP/1.1 ")[1:])
    for raw, body, content_type, request_id in (
            (text, b"hello", b"text/plain; charset=utf-8", b"id-1"),
            (json_answer, b'{"json":[1,2]}', b"application/json", b"id-\xe9")):
        head, _, rest = raw.partition(b"\r\n\r\n")
        status, *lines = head.split(b"\r\n")
        headers = dict(line.split(b": ", 1) for line in lines)
        assert status == b"HTTP/1.1 200 OK" and rest == body
        assert headers.pop(b"date").endswith(b" GMT") and headers.pop(b"server") == b"uvicorn"
        assert headers == {b"content-length": b"%d" % len(body),
                           b"content-type": content_type, b"x-request-id": request_id}


async def test_a_head_with_a_lone_line_break_is_refused(proxy: Proxy) -> None:
    got, _ = await proxy.exchange(b"GET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 502 ") and b"a lone CR or LF" in got
    assert b"transfer-encoding" not in got


async def test_the_route_metrics_count_a_raw_answer_by_its_status(proxy: Proxy) -> None:
    from servefleet.proxy.metrics import REQUESTS

    ok = REQUESTS.labels("app", "d", "/", "200")
    before = ok.value
    await proxy.exchange(GET, GET)
    assert proxy.last_raw_sent == 2 and ok.value == before + 2
