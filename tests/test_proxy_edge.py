"""The proxy's edge, with real processes: what a client may not send on (the
cluster's x-servefleet-* headers, gRPC metadata), who may read admin paths, what
a client may hold of the proxy (head sizes, slow heads, idle connections, more
connections than the cap, gRPC messages past what replicas take); 127.0.0.2 is a
second client. Last, the edge's protocol in-process, for heads in chunks."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from test_app_serving import running
from websockets.asyncio.client import connect

from servefleet._private.edge.http_protocol import CoalescingTransport
from servefleet._private.lifecycle import start_http_server
from servefleet._private.security import tokens
from servefleet._private.testing import ProxyProcess, free_port, wait_for
from servefleet._private.wire import GRPC_MAX_REQUEST_BYTES
from servefleet.proxy.edge import HeadClock
from servefleet.proxy.limits import EdgeLimits
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb

ROOT = Path(__file__).resolve().parent.parent
APPS = str(ROOT / "tests" / "apps")
sys.path.insert(0, str(ROOT / "examples"))

from grpc_classifier import classifier_pb2 as pb  # noqa: E402
from grpc_classifier import classifier_pb2_grpc as pb_grpc  # noqa: E402

slow = pytest.mark.slow
SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"
# What a client tries to pass off as the cluster's word.
FORGED = {"x-servefleet-models": "m1", "x-servefleet-rejected": "overloaded",
          "x-servefleet-stream": "1", "x-servefleet-route-prefix": "/elsewhere",
          "x-servefleet-caller": "admin", "X-ServeFleet-Anything-New": "y"}


@pytest.fixture
def edge(grpc_cluster):
    """tests/apps/edge_app.py on /edge (HTTP, WebSocket and gRPC) behind a
    proxy with a gRPC port; yields (proxy, gRPC target)."""
    client, proxy, target = grpc_cluster
    client.deploy_applications([apb.ApplicationSpec(
        name="edge", route_prefix="/edge", import_path="edge_app:app",
        grpc_servicer_functions=[SERVICER], runtime=dpb.RuntimeOptions(working_dir=APPS))])
    wait_for(lambda: running(client, "edge"), 90, "edge RUNNING")
    wait_for(lambda: _answers(proxy.url + "/edge"), 30, "the route at the proxy")
    yield proxy, target


@pytest.fixture
def lone_proxy(tmp_path) -> Iterator[Callable[..., ProxyProcess]]:
    """Starts proxies with these flags and no controller to answer them: the
    edge is the proxy's own, before any route or replica."""
    started: list[ProxyProcess] = []

    def start(*args: str) -> ProxyProcess:
        proxy = ProxyProcess([f"127.0.0.1:{free_port()}"], log_dir=tmp_path,
                             extra_args=list(args)).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _own(seen: dict[str, list[str]]) -> dict[str, list[str]]:
    return {k: v for k, v in seen.items() if k.lower().startswith("x-servefleet-")}


@slow
def test_client_servefleet_headers_and_metadata_never_reach_a_replica(edge) -> None:
    proxy, target = edge
    seen = httpx.get(proxy.url + "/edge", headers={**FORGED, "x-kept": "yes"}).json()
    # Only the proxy's own word on the route prefix; the client's other headers pass.
    assert _own(seen) == {"x-servefleet-route-prefix": ["/edge"]}, seen
    assert seen["x-kept"] == ["yes"]

    async def handshake() -> dict[str, list[str]]:
        url = proxy.url.replace("http://", "ws://") + "/edge/socket"
        async with connect(url, additional_headers=FORGED, open_timeout=10) as ws:
            return json.loads(await ws.recv())
    assert _own(asyncio.run(handshake())) == {"x-servefleet-route-prefix": ["/edge"]}

    with grpc.insecure_channel(target) as channel:
        reply = pb_grpc.ClassifierStub(channel).Predict(
            pb.PredictRequest(text="hi"), timeout=10,
            metadata=(("application", "edge"),
                      *((k.lower(), v) for k, v in FORGED.items())))
    metadata = json.loads(reply.word)
    assert _own(metadata) == {} and metadata["application"] == ["edge"], metadata


@slow
def test_grpc_messages_past_what_replicas_take_are_refused_at_the_ingress(edge) -> None:
    proxy, target = edge
    metadata = (("application", "edge"),)
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.ClassifierStub(channel)
        # Just under the limit: the replica takes it (the limits agree).
        under = GRPC_MAX_REQUEST_BYTES - 64
        assert stub.Predict(pb.PredictRequest(text="a" * under), timeout=30,
                            metadata=metadata).label == str(under)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(pb.PredictRequest(text="a" * (GRPC_MAX_REQUEST_BYTES + 1024)),
                         timeout=30, metadata=metadata)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(GRPC_MAX_REQUEST_BYTES) in (refused.value.details() or "")
    # Refused by the proxy's ingress: it never sent the call to a replica (a
    # call it forwarded counts with the status the replica gave).
    metrics = httpx.get(proxy.url + "/-/metrics", timeout=10).text
    forwarded = [line for line in metrics.splitlines()
                 if line.startswith("servefleet_proxy_grpc_calls_total{")]
    assert forwarded and not [line for line in forwarded if "RESOURCE_EXHAUSTED" in line]


@slow
def test_admin_paths_answer_loopback_clients_and_tokens_only(lone_proxy, tmp_path) -> None:
    token_file = tmp_path / "http-tokens"
    token = tokens.create(token_file, "prometheus", "reader")
    bearer = {"authorization": f"Bearer {token}"}
    relayed = {"x-forwarded-for": "203.0.113.9"}  # a load balancer on this host

    default = lone_proxy()
    for path in ("/-/routes", "/-/metrics", "/-/healthz"):
        assert httpx.get(default.url + path).status_code == 200
    other = httpx.HTTPTransport(local_address="127.0.0.2")  # 127.0.0.0/8 is loopback
    with httpx.Client(transport=other) as second:
        assert second.get(default.url + "/-/routes").status_code == 200
    # A loopback peer relaying for someone else is not a local client.
    refused = httpx.get(default.url + "/-/routes", headers=relayed)
    assert refused.status_code == 403 and "--admin-paths" in refused.text
    assert httpx.get(default.url + "/-/healthz", headers=relayed).status_code == 200

    with_tokens = lone_proxy("--http-tokens", str(token_file))
    assert httpx.get(with_tokens.url + "/-/metrics", headers=relayed).status_code == 401
    assert httpx.get(with_tokens.url + "/-/metrics",
                     headers={**relayed, **bearer}).status_code == 200

    only_tokens = lone_proxy("--admin-paths", "token", "--http-tokens", str(token_file))
    for path in ("/-/routes", "/-/metrics"):
        denied = httpx.get(only_tokens.url + path)
        assert denied.status_code == 401 and denied.headers["www-authenticate"].startswith(
            "Bearer")
        assert httpx.get(only_tokens.url + path,
                         headers={"authorization": "Bearer sft_wrong"}).status_code == 401
        assert httpx.get(only_tokens.url + path, headers=bearer).status_code == 200
    assert "servefleet_proxy" in httpx.get(only_tokens.url + "/-/metrics", headers=bearer).text
    assert httpx.get(only_tokens.url + "/-/healthz").text == "ok"  # load balancers probe it

    public = lone_proxy("--admin-paths", "public")
    assert httpx.get(public.url + "/-/routes", headers=relayed).status_code == 200


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _answer(sock: socket.socket) -> bytes:
    """What the proxy sends until it closes the connection."""
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    return got


def _send_all_it_takes(sock: socket.socket, data: bytes) -> None:
    """Send `data`; the proxy may close before it has all of it."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


@slow
def test_heads_past_the_limits_are_refused_while_they_arrive(lone_proxy) -> None:
    proxy = lone_proxy()
    assert proxy.proc is not None
    head = b"GET /x HTTP/1.1\r\nhost: a\r\nx-big: "
    # The limit and a little more of one header that never ends: refused
    # without waiting for more (the socket times out if the proxy waits).
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as s:
        s.sendall(head + b"y" * (65536 + 1024))
        got = _answer(s)
    assert got.startswith(b"HTTP/1.1 431 ") and b"the limit is 65536" in got, got[:300]

    # A 1 MiB one, four times: refused each time, the proxy holding none of it.
    before = _rss_kib(proxy.proc.pid)
    for _ in range(4):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as s:
            _send_all_it_takes(s, head + b"y" * (1 << 20))
            assert _answer(s).startswith(b"HTTP/1.1 431 ")
    grown = _rss_kib(proxy.proc.pid) - before
    assert grown < 1024, f"the proxy's RSS grew by {grown} KiB"

    # A request target past 64 KiB: 414, whole or still arriving.
    for sent in (b"GET /" + b"a" * (70 * 1024) + b" HTTP/1.1\r\nhost: a\r\n\r\n",
                 b"GET /" + b"a" * (1 << 20)):
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as s:
            _send_all_it_takes(s, sent)
            got = _answer(s)
        assert got.startswith(b"HTTP/1.1 414 ") and b"the limit is 65535" in got, got[:300]
    # Just under both limits: taken (no controller here, so no route table:
    # 503 once the proxy's first wait for one is over).
    assert httpx.get(proxy.url + "/" + "a" * 60_000, timeout=30,
                     headers={"x-big": "y" * 60_000}).status_code == 503
    assert httpx.get(proxy.url + "/-/healthz").text == "ok"


def _closed_by_proxy(sock: socket.socket, trickle: bytes = b"", within: float = 30.0
                     ) -> bytes:
    """Send `trickle` a byte at a time, a quarter second apart, until the proxy
    closes the connection; what it sent before closing. Fails after `within`
    seconds (the proxy never closed)."""
    deadline = time.monotonic() + within
    got, sent = b"", 0
    while time.monotonic() < deadline:
        if sent < len(trickle):
            try:
                sock.send(trickle[sent:sent + 1])
                sent += 1
            except (BrokenPipeError, ConnectionResetError):
                return got
        if select.select([sock], [], [], 0.25)[0]:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return got
            if not chunk:
                return got
            got += chunk
    raise AssertionError(f"the proxy kept the connection open for {within}s: {got[:200]!r}")


@slow
def test_slow_heads_and_idle_connections_are_closed(lone_proxy) -> None:
    proxy = lone_proxy("--header-timeout-s", "1", "--keep-alive-timeout-s", "1")
    address = ("127.0.0.1", proxy.port)
    # Slowloris: a head that keeps coming and never ends.
    with socket.create_connection(address) as slow:
        slow.sendall(b"GET /-/healthz HTTP/1.1\r\nhost: a\r\n")
        got = _closed_by_proxy(slow, trickle=b"x-slow: " + b"z" * 1000)
    assert got.startswith(b"HTTP/1.1 408 "), got[:200]
    # A connection that never says anything is closed too, without a word.
    with socket.create_connection(address) as silent:
        assert _closed_by_proxy(silent) == b""
    # So is one idle after its answer (keep-alive).
    with socket.create_connection(address) as idle:
        idle.sendall(b"GET /-/healthz HTTP/1.1\r\nhost: a\r\n\r\n")
        assert _closed_by_proxy(idle).startswith(b"HTTP/1.1 200 ")
    assert httpx.get(proxy.url + "/-/healthz").text == "ok"


@slow
def test_a_connection_idle_as_long_as_pools_keep_them_is_served(lone_proxy) -> None:
    """Pools reuse idle connections (httpx up to 5 s, aiohttp 15 s): the old 5 s raced httpx."""
    with socket.create_connection(("127.0.0.1", lone_proxy().port), timeout=10) as sock:
        for pause in (0, 6):
            time.sleep(pause)
            sock.sendall(b"GET /-/healthz HTTP/1.1\r\nhost: a\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 "), f"after {pause} s idle"


@slow
def test_connections_past_the_cap_get_503_and_are_closed(lone_proxy) -> None:
    proxy = lone_proxy("--max-connections", "2", "--keep-alive-timeout-s", "60",
                       "--header-timeout-s", "60")
    address = ("127.0.0.1", proxy.port)
    held = [socket.create_connection(address, timeout=10) for _ in range(2)]
    try:
        for sock in held:  # each served: both count
            sock.sendall(b"GET /-/healthz HTTP/1.1\r\nhost: a\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        refused = httpx.get(proxy.url + "/-/healthz", timeout=10)
        assert refused.status_code == 503 and "2" in refused.text
        assert refused.headers["connection"] == "close"
        # Refused at once, before it says anything, then closed.
        with socket.create_connection(address, timeout=10) as quiet:
            assert _answer(quiet).startswith(b"HTTP/1.1 503 ")
        held.pop().close()
        wait_for(lambda: _answers(proxy.url + "/-/healthz"), 10, "a freed slot")
    finally:
        for sock in held:
            sock.close()


async def sizes(scope, receive, send) -> None:
    """Answers `<target bytes> <header count> <body bytes>`."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    text = f"{len(scope['raw_path']) + len(scope['query_string'])} {len(scope['headers'])} " \
           f"{len(body)}".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


@pytest.fixture
async def edge_port() -> AsyncIterator[int]:
    """The edge's protocol with the default limits, serving `sizes`."""
    clock = HeadClock(EdgeLimits(max_connections=100))
    server = await start_http_server(sizes, "127.0.0.1", 0, http=clock.protocol(),
                                     date_header=False, server_header=False)
    clock.start()
    yield server.servers[0].sockets[0].getsockname()[1]
    clock.stop()
    await server.shutdown()


async def _exchange(port: int, chunks: list[bytes], until_closed: bool = False) -> bytes:
    """Send `chunks` one write each; the first answer back (with `until_closed`,
    all the proxy sends until it closes the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        if until_closed:
            return await asyncio.wait_for(reader.read(), 20)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        return head + await asyncio.wait_for(reader.readexactly(length), 20)
    finally:
        writer.close()


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


async def test_heads_within_the_limits_pass_however_they_are_cut(edge_port: int) -> None:
    """Near both limits, with a body in the same write or a byte at a time at
    the edges: measured, not refused."""
    target = b"/" + b"a" * 65000
    head = (b"POST " + target + b" HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\nx-big: "
            + b"y" * 65000 + b"\r\n\r\n")
    for chunks in ([head + b"hello"], _pieces(head + b"hello", 1000),
                   [head[:20], head[20:-1], head[-1:] + b"hello"]):
        got = await _exchange(edge_port, chunks)
        assert got.startswith(b"HTTP/1.1 200 ") and got.endswith(b"65001 3 5"), got[:200]


async def test_a_pipelined_head_past_the_limit_is_measured_too(edge_port: int) -> None:
    """Two requests in one write, the second's head past the limit: its first
    bytes came with the first request's, and it is still refused (the first
    is answered, and the connection closed after it)."""
    first = b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n"
    second = b"GET /two HTTP/1.1\r\nhost: a\r\nx-big: " + b"y" * 70_000 + b"\r\n\r\n"
    got = await _exchange(edge_port, [first + second], until_closed=True)
    assert got.startswith(b"HTTP/1.1 200 ") and got.count(b"HTTP/1.1 ") == 1, got[:300]


async def test_refusals_half_close_after_what_was_written() -> None:
    """CoalescingTransport.write_eof sends what is buffered first."""
    sent: list[bytes] = []

    class Recording:
        def write(self, data: bytes) -> None:
            sent.append(data)

        def write_eof(self) -> None:
            sent.append(b"<eof>")

        def is_closing(self) -> bool:
            return False

    transport = CoalescingTransport(Recording(), asyncio.get_running_loop())  # type: ignore[arg-type]
    transport.write(b"HTTP/1.1 431 ")
    transport.write_eof()
    assert sent == [b"HTTP/1.1 431 ", b"<eof>"]
