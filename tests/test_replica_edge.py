"""The edge's limits on every port a replica opens (replica/edge.py), sent
straight to the ports of real replica processes: HTTP (heads, slow heads,
bodies past the cluster's limit, handle calls past it), metrics, the user's
gRPC services and the control port. One application serves all of them, its
replicas told a 1 s head timeout by their runtime.env. Last, the replica's
edge in-process: the body limit's cases, the connection cap's refusal and
the settings read from the environment."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from test_proxy_edge import _answer, _closed_by_proxy, _send_all_it_takes

from servefleet._private.lifecycle import start_http_server
from servefleet._private.testing import ControllerProcess, ProxyProcess, stop_cluster, wait_for
from servefleet._private.wire import METHOD_HEADER, REJECTED_HEADER, ROUTES_KEY
from servefleet.client import ControllerClient
from servefleet.replica.edge import HOP_HEADROOM_BYTES, ReplicaEdge, limits_from_env
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import replica_pb2, replica_pb2_grpc, status_pb2, watch_pb2

ROOT = Path(__file__).resolve().parent.parent
APPS = str(ROOT / "tests" / "apps")
sys.path.insert(0, str(ROOT / "examples"))

from grpc_classifier import classifier_pb2 as pb  # noqa: E402
from grpc_classifier import classifier_pb2_grpc as pb_grpc  # noqa: E402

slow = pytest.mark.slow
SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"
# The cluster's http_options.max_request_body_bytes here.
LIMIT = 1 << 20
# A replica's header limit with the defaults: the proxy's, and room for its own headers.
HEADER_LIMIT = 64 * 1024 + HOP_HEADROOM_BYTES
# Past every header limit, by far (the 8 MiB).
HUGE = 8 << 20


@pytest.fixture(scope="module")
def ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """replica_edge_app on /edge, its replicas with a 1 s head timeout; the
    Front replica's ports (http, metrics, grpc, control) and a proxy."""
    logs = tmp_path_factory.mktemp("logs")
    # A cluster of its own (the process runtime finds replicas by cluster);
    # code from tests/apps, as the conftest's fleets allow.
    controller = ControllerProcess(f"sqlite://{logs}/state.db", log_dir=logs,
                                   cluster=f"edge-{os.getpid()}-{uuid.uuid4().hex[:6]}",
                                   extra_args=["--allow-working-dir", "/"]).start()
    client = ControllerClient([controller.address], timeout=30)
    proxy = ProxyProcess([controller.address], log_dir=logs)
    try:
        client.deploy_applications([apb.ApplicationSpec(
            name="edge", route_prefix="/edge", import_path="replica_edge_app:app",
            grpc_servicer_functions=[SERVICER],
            runtime=dpb.RuntimeOptions(working_dir=APPS, env={
                "SERVEFLEET_REPLICA_HEADER_TIMEOUT_S": "1"}))],
            http_options=apb.HttpOptions(max_request_body_bytes=LIMIT))
        wait_for(lambda: (info := client.application_status("edge")) is not None
                 and info.status == status_pb2.APPLICATION_STATUS_RUNNING, 120, "edge RUNNING")
        record = next(r.record for r in client.replicas("edge", "Front")
                      if r.state == replica_pb2.REPLICA_STATE_RUNNING)
        proxy.start()
        wait_for(lambda: httpx.get(proxy.url + "/edge", timeout=5).status_code == 200, 30,
                 "the proxy reaching /edge")
        yield {"http": record.http_address, "metrics": record.metrics_address,
               "grpc": record.grpc_address, "control": record.control_address,
               "proxy": proxy}
    finally:
        stop_cluster(controller, client, [proxy])


def _address(host_port: str) -> tuple[str, int]:
    host, _, port = host_port.rpartition(":")
    return host, int(port)


def _refusal(host_port: str, sent: bytes) -> bytes:
    """What the port answers to `sent` before it closes the connection."""
    with socket.create_connection(_address(host_port), timeout=20) as sock:
        _send_all_it_takes(sock, sent)
        return _answer(sock)


# A request with an 8 MiB header; the connection ends after the answer.
HUGE_HEAD = b"GET /x HTTP/1.1\r\nhost: a\r\nconnection: close\r\nx-big: " + b"y" * HUGE \
    + b"\r\n\r\n"


@slow
def test_a_replicas_http_port_refuses_large_and_slow_heads(ports: dict) -> None:
    http = ports["http"]
    got = _refusal(http, HUGE_HEAD)  # was 200
    assert got.startswith(b"HTTP/1.1 431 ") and b"the limit is %d" % HEADER_LIMIT in got \
        and b"SERVEFLEET_REPLICA_MAX_HEADER_BYTES" in got, got[:300]
    got = _refusal(http, b"GET /" + b"a" * (70 * 1024) + b" HTTP/1.1\r\nhost: a\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 414 ") and b"the limit is 65535" in got, got[:300]
    with socket.create_connection(_address(http)) as slow_head:
        slow_head.sendall(b"GET / HTTP/1.1\r\nhost: a\r\n")
        got = _closed_by_proxy(slow_head, trickle=b"x-slow: " + b"z" * 1000)
    assert got.startswith(b"HTTP/1.1 408 ") and b"SERVEFLEET_REPLICA_HEADER_TIMEOUT_S" in got


@slow
def test_plain_http_bodies_past_the_clusters_limit_get_413(ports: dict) -> None:
    http = ports["http"]
    assert httpx.post(f"http://{http}/", content=b"x" * LIMIT, timeout=30).json() == {
        "body": LIMIT}
    declared = httpx.post(f"http://{http}/", content=b"x" * (LIMIT + 1), timeout=30)
    assert declared.status_code == 413 and "max_request_body_bytes" in declared.text

    def chunks() -> Iterator[bytes]:
        for _ in range(5):
            yield b"x" * (LIMIT // 4)
    chunked = httpx.post(f"http://{http}/", content=chunks(), timeout=30)
    assert chunked.status_code == 413 and str(LIMIT) in chunked.text, chunked.text


@slow
def test_handle_calls_past_the_body_limit_and_proxied_heads_still_pass(ports: dict) -> None:
    # Handle calls are not HTTP clients' requests: Front sends Sink 4 MiB.
    through = httpx.get(f"http://{ports['http']}/", params={"handle": 4 * LIMIT}, timeout=60)
    assert through.status_code == 200 and through.json() == {
        "through_handle": 4 * LIMIT}, through.text
    # A head near the proxy's limit, with what the proxy adds, is within the replica's.
    proxied = httpx.get(ports["proxy"].url + "/edge", headers={"x-big": "y" * 65_000},
                        timeout=30)
    assert proxied.json() == {"body": 0}, proxied.text


@slow
def test_a_replicas_metrics_port_has_the_same_limits(ports: dict) -> None:
    metrics = ports["metrics"]
    assert httpx.get(f"http://{metrics}/metrics", timeout=10).status_code == 200
    got = _refusal(metrics, HUGE_HEAD)  # was 200
    assert got.startswith(b"HTTP/1.1 431 "), got[:300]
    with socket.create_connection(_address(metrics)) as slow_head:
        slow_head.sendall(b"GET /metrics HTTP/1.1\r\nhost: a\r\n")
        assert _closed_by_proxy(slow_head, trickle=b"x" * 1000).startswith(b"HTTP/1.1 408 ")


@slow
def test_a_replicas_grpc_ports_refuse_large_metadata_and_silent_connections(
        ports: dict) -> None:
    with grpc.insecure_channel(ports["grpc"]) as channel:
        stub = pb_grpc.ClassifierStub(channel)
        # The edge's header limit, not gRPC's default 16 KiB: taken.
        reply = stub.Predict(pb.PredictRequest(text="hi"), timeout=30,
                             metadata=(("x-big", "y" * 40_000),))
        assert reply.label == "2"
        with pytest.raises(grpc.RpcError) as refused:
            stub.Predict(pb.PredictRequest(text="hi"), timeout=30,
                         metadata=(("x-big", "y" * HUGE),))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert str(HEADER_LIMIT) in (refused.value.details() or "")

    with grpc.insecure_channel(ports["control"]) as channel:
        control = replica_pb2_grpc.ReplicaServiceStub(channel)
        assert control.GetMetadata(replica_pb2.GetMetadataRequest(), timeout=30).replica_id
        with pytest.raises(grpc.RpcError) as refused:
            control.GetMetadata(replica_pb2.GetMetadataRequest(), timeout=30,
                                metadata=(("x-big", "y" * HUGE),))
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    # A connection that never finishes starting HTTP/2 is closed after the
    # head timeout (gRPC's own default: 120 s); gRPC may say why first.
    for port in ("grpc", "control"):
        for sent in (b"", b"PRI * HTTP/2.0\r\n"):
            with socket.create_connection(_address(ports[port])) as silent:
                silent.sendall(sent)
                _closed_by_proxy(silent, within=20)  # fails if never closed


# The replica's edge in-process.

# The bytes body_size had read when it was told its client left.
LEFT: list[int] = []


async def body_size(scope, receive, send) -> None:
    """Answers the size of the body it read; notes it in LEFT if the client left."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            LEFT.append(size)
            return
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    text = str(size).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


@pytest.fixture
async def replica_port() -> AsyncIterator[tuple[int, ReplicaEdge]]:
    """A replica's HTTP protocol (default limits, at most 2 connections) serving body_size."""
    edge = ReplicaEdge(limits_from_env({"SERVEFLEET_REPLICA_MAX_CONNECTIONS": "2"}, 1024))
    server = await start_http_server(body_size, "127.0.0.1", 0, http=edge.http_protocol())
    edge.clock.start()
    LEFT.clear()
    yield server.servers[0].sockets[0].getsockname()[1], edge
    edge.clock.stop()
    await server.shutdown()


async def _exchange(port: int, sent: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(sent)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    finally:
        writer.close()


def _post(length: bytes, body: bytes, *extra: bytes) -> bytes:
    return b"".join([b"POST / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n", *extra, length,
                     b"\r\n", body])


async def test_bodies_past_the_clusters_limit_are_refused_but_handle_calls_are_not(
        replica_port: tuple[int, ReplicaEdge]) -> None:
    port, edge = replica_port
    edge.watching(lambda snapshot: None)(watch_pb2.Snapshot(
        key=ROUTES_KEY, routes=watch_pb2.RouteTable(max_request_body_bytes=10)))
    assert edge.max_body_bytes == 10
    within = await _exchange(port, _post(b"content-length: 10\r\n", b"x" * 10))
    assert within.startswith(b"HTTP/1.1 200 ") and within.endswith(b"\r\n10"), within
    # Declared past it: refused before the app sees the request.
    declared = await _exchange(port, _post(b"content-length: 11\r\n", b"x" * 11))
    assert declared.startswith(b"HTTP/1.1 413 ") and b"is 11 bytes; the limit is 10 " \
        b"(http_options.max_request_body_bytes)" in declared, declared
    assert LEFT == []
    # Chunked past it: refused once counted; the app saw its client leave.
    chunked = await _exchange(port, _post(b"transfer-encoding: chunked\r\n",
                                          b"8\r\nxxxxxxxx\r\n8\r\nxxxxxxxx\r\n0\r\n\r\n"))
    assert chunked.startswith(b"HTTP/1.1 413 ") and b"passed 10 bytes" in chunked, chunked
    for _ in range(100):  # the app is told on its next step
        if LEFT:
            break
        await asyncio.sleep(0.1)
    assert len(LEFT) == 1, "the app was not told"
    # A handle call: no body limit.
    call = await _exchange(port, _post(b"content-length: 100\r\n", b"x" * 100,
                                       METHOD_HEADER + b": size\r\n"))
    assert call.startswith(b"HTTP/1.1 200 ") and call.endswith(b"\r\n100"), call


async def test_connections_past_the_cap_are_sent_to_another_replica(
        replica_port: tuple[int, ReplicaEdge]) -> None:
    port, _ = replica_port
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        refused = await _exchange(port, b"")
        assert refused.startswith(b"HTTP/1.1 503 ") and b"this replica has 2 connections " \
            b"open, its limit (SERVEFLEET_REPLICA_MAX_CONNECTIONS)" in refused, refused
        # Never read: a proxy takes the request to another replica (dataplane/forward.py).
        assert REJECTED_HEADER + b": overloaded\r\n" in refused
    finally:
        for _, writer in held:
            writer.close()


def test_the_limits_come_from_the_deployments_environment() -> None:
    defaults = limits_from_env({}, open_files=1024)
    assert (defaults.max_header_bytes, defaults.max_url_bytes, defaults.header_timeout_s,
            defaults.max_connections) == (HEADER_LIMIT, 65535, 10.0, 480)
    raised = limits_from_env({"SERVEFLEET_REPLICA_MAX_HEADER_BYTES": "1048576",
                              "SERVEFLEET_REPLICA_MAX_CONNECTIONS": "0"}, open_files=1024)
    assert raised.max_header_bytes == (1 << 20) + HOP_HEADROOM_BYTES
    assert raised.max_connections == 0
    for name, value, why in (("MAX_HEADER_BYTES", "lots", "not a number: 'lots'"),
                             ("MAX_URL_BYTES", "70000", "between 256 and 65535"),
                             ("HEADER_TIMEOUT_S", "0", "more than 0")):
        with pytest.raises(ValueError, match=f"^SERVEFLEET_REPLICA_{name}: {why}"):
            limits_from_env({f"SERVEFLEET_REPLICA_{name}": value}, open_files=1024)
