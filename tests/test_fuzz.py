"""Fuzzing: random and mutated input to every controller RPC and to the proxy's
HTTP port, against real processes, for a bounded number of examples.

What must hold: no process crashes, no traceback reaches a client, and every
answer is a defined status (never INTERNAL or UNKNOWN from the controller,
never a 500 from the proxy itself).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loadgen import answers

from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import controller_pb2, deployment_pb2, watch_pb2

# Hypothesis warns (an error here) when the global `random` changes while it
# draws a case; a thread an earlier test left in this process (a client's
# jittered backoff) can do that at any moment, which says nothing of the case.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies")]
APPS = str(Path(__file__).parent / "apps")
SERVICE = controller_pb2.DESCRIPTOR.services_by_name["ControllerService"]
# Shutdown is left out: a valid (even empty) ShutdownRequest stops the controller.
METHODS = [m for m in SERVICE.methods if m.name != "Shutdown"]
DEFINED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.FAILED_PRECONDITION,
           grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.DEADLINE_EXCEEDED,
           grpc.StatusCode.RESOURCE_EXHAUSTED}
# SERVEFLEET_FUZZ_SCALE=10 runs ten times the examples (a long run, outside CI).
SCALE = float(os.environ.get("SERVEFLEET_FUZZ_SCALE", "1"))
FUZZ = settings(max_examples=int(500 * SCALE), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerProcess]:
    tmp = tmp_path_factory.mktemp("fuzz")
    proc = ControllerProcess(f"sqlite://{tmp}/state.db", cluster="fuzz", runtime="none",
                             log_dir=tmp, extra_args=["--allow-working-dir", "/"]).start()
    with ControllerClient([proc.address], timeout=20) as client:
        client.status()
    yield proc
    proc.stop()


def valid_request(method) -> bytes:
    """A well-formed request of the method's type, to mutate."""
    message = {
        "Deploy": controller_pb2.DeployRequest(spec=deployment_pb2.DeploymentSpec(
            name="Fuzzed", import_path="m:app", route_prefix="/f")),
        "Watch": watch_pb2.WatchRequest(known={"routes": ""}, heartbeat_s=1),
        "StreamLoad": controller_pb2.StreamLoadRequest(report=controller_pb2.ReportLoadRequest(
            reporter_id="r", queued={"default/Fuzzed": 1})),
    }.get(method.name)
    return message.SerializeToString() if message is not None else b""


@st.composite
def payloads(draw) -> tuple[object, bytes]:
    method = draw(st.sampled_from(METHODS))
    if draw(st.booleans()):
        return method, draw(st.binary(max_size=256))
    raw = bytearray(valid_request(method))
    for _ in range(draw(st.integers(0, 4))):  # flip, cut or grow
        if raw and draw(st.booleans()):
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
        elif raw:
            del raw[draw(st.integers(0, len(raw) - 1)):]
        else:
            raw += draw(st.binary(min_size=1, max_size=8))
    return method, bytes(raw)


def call(channel: grpc.Channel, method, raw: bytes) -> grpc.StatusCode:
    path = f"/{SERVICE.full_name}/{method.name}"
    # Raw bytes both ways (no serializers); the stubs' generics cannot say so.
    unary_stream: Any = channel.unary_stream(path)
    stream_unary: Any = channel.stream_unary(path)
    unary_unary: Any = channel.unary_unary(path)
    try:
        if method.server_streaming:
            stream = unary_stream(raw, timeout=1.5)
            next(stream, None)
            stream.cancel()
        elif method.client_streaming:
            stream_unary(iter([raw, raw]), timeout=2)
        else:
            unary_unary(raw, timeout=2)
    except grpc.RpcError as e:
        assert "Traceback" not in (e.details() or ""), e.details()
        return e.code()
    return grpc.StatusCode.OK


def test_random_and_mutated_messages_get_defined_statuses(controller) -> None:
    seen: set[grpc.StatusCode] = set()
    with grpc.insecure_channel(controller.address) as channel:

        @FUZZ
        @given(payloads())
        def one(case) -> None:
            code = call(channel, *case)
            seen.add(code)
            assert code in DEFINED or code == grpc.StatusCode.CANCELLED, code

        one()
    assert grpc.StatusCode.INVALID_ARGUMENT in seen  # the fuzzing reached the validation
    assert controller.proc is not None and controller.proc.poll() is None
    assert "Traceback" not in controller.logs()
    with ControllerClient([controller.address], timeout=10) as client:
        client.status()


@pytest.fixture(scope="module")
def proxy(controller, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyProcess]:
    with ControllerClient([controller.address], timeout=20) as client:
        client.deploy(deployment_pb2.DeploymentSpec(name="Routed", import_path="m:app",
                                                    route_prefix="/r"))
    started = ProxyProcess([controller.address],
                           log_dir=tmp_path_factory.mktemp("proxy")).start()
    wait_for(lambda: answers(started.url + "/-/healthz"), 20, "the proxy")
    yield started
    started.stop()


REQUEST = b"POST /r/x?q=1 HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\nx-a: b\r\n\r\nhello"


@st.composite
def http_bytes(draw) -> bytes:
    if draw(st.booleans()):
        return draw(st.binary(min_size=1, max_size=512))
    raw = bytearray(REQUEST)
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(raw) - 1))
        action = draw(st.sampled_from(["flip", "cut", "insert", "crlf"]))
        if action == "flip":
            raw[i] = draw(st.integers(0, 255))
        elif action == "cut":
            del raw[i:i + draw(st.integers(1, 8))]
        elif action == "insert":
            raw[i:i] = draw(st.binary(min_size=1, max_size=16))
        else:
            raw[i:i] = b"\r\n"
    return bytes(raw)


def exchange(port: int, raw: bytes, half_close: bool = True, timeout: float = 3) -> bytes:
    """Send raw bytes and read what comes back until the server closes (or
    `timeout`). With half_close the write side is shut after sending: a server
    may take that as the client leaving (nginx and uvicorn do) and not answer
    a request still in progress, so a test that needs its answers passes False
    and asks for `connection: close`."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except (TimeoutError, ConnectionResetError):
            pass
    return answer


def test_random_and_mutated_http_gets_defined_answers(proxy) -> None:
    statuses: set[int] = set()

    @FUZZ
    @given(http_bytes())
    def one(raw: bytes) -> None:
        answer = exchange(proxy.port, raw)
        if not answer:
            return  # closed without a word: allowed for garbage
        assert answer.startswith(b"HTTP/1.1 "), answer[:80]
        status = int(answer[9:12])
        statuses.add(status)
        assert status in (200, 400, 404, 405, 413, 431, 502, 503, 504), answer[:200]
        assert b"Traceback" not in answer

    one()
    assert statuses & {400, 404, 503}
    assert proxy.proc is not None and proxy.proc.poll() is None
    assert "Traceback" not in proxy.logs()
    assert httpx.get(proxy.url + "/-/healthz").text == "ok"
