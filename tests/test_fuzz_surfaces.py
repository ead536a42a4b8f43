"""Fuzzing the other public surfaces, against real processes: the
controller's HTTP face on a cluster with tokens, and the proxy's gRPC ingress.
Random and mutated input gets defined answers, no traceback, no crash
(the controller's API and the proxy's HTTP port: test_fuzz.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import SCALE, exchange

from servefleet._private.security import tokens
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2

# Hypothesis warns (an error here) when the global `random` changes while it
# draws a case; a thread an earlier test left in this process (a client's
# jittered backoff) can do that at any moment, which says nothing of the case.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies")]
FUZZ = settings(max_examples=int(300 * SCALE), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, ...]]:
    tmp = tmp_path_factory.mktemp("fuzz-surfaces")
    path = tmp / "tokens"
    reader = tokens.create(path, "reader-1", "reader")
    admin = tokens.create(path, "admin-1", "admin")
    proxy_token = tokens.create(path, "proxy-1", "proxy")
    http, grpc_port = f"127.0.0.1:{free_port()}", free_port()
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster="fuzz-surfaces",
                                   runtime="none", log_dir=tmp,
                                   extra_args=["--allow-working-dir", "/", "--auth-tokens",
                                               str(path), "--metrics-listen", http]).start()
    with ControllerClient([controller.address], timeout=20,
                          credentials=Credentials(token=admin)) as client:
        client.deploy(deployment_pb2.DeploymentSpec(
            name="Routed", import_path="m:app", route_prefix="/r",
            grpc_servicer_functions=["m_pb2_grpc:add_MServicer_to_server"]))
    proxy = ProxyProcess([controller.address], log_dir=tmp, extra_args=[
        "--token", proxy_token, "--grpc-listen", f"127.0.0.1:{grpc_port}"]).start()
    yield controller, proxy, http, grpc_port, reader
    proxy.stop()
    controller.stop()


REQUEST = (b"GET /api/status HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n"
           b"authorization: Bearer TOKEN\r\n\r\n")


@st.composite
def http_bytes(draw, token: str) -> bytes:
    raw = bytearray(REQUEST.replace(b"TOKEN", token.encode()))
    if draw(st.booleans()):
        path = draw(st.sampled_from([b"/api/status", b"/metrics", b"/-/metrics-targets",
                                     b"/-/dashboard", b"/nowhere", b"/api/status?x=1"]))
        raw = raw.replace(b"/api/status", path, 1)
    for _ in range(draw(st.integers(0, 5))):
        i = draw(st.integers(0, len(raw) - 1))
        action = draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            raw[i] = draw(st.integers(0, 255))
        elif action == "cut":
            del raw[i:i + draw(st.integers(1, 8))]
        else:
            raw[i:i] = draw(st.binary(min_size=1, max_size=16))
    return bytes(raw)


def test_the_controllers_http_face_answers_garbage_with_defined_statuses(secured) -> None:
    controller, _, http, _, reader = secured
    port = int(http.rpartition(":")[2])
    statuses: set[int] = set()

    @settings(FUZZ, max_examples=int(100 * SCALE))
    @given(st.data())
    def one(data) -> None:
        # Not half-closed: uvicorn takes that as the client leaving, and a
        # request still being answered (as /api/status may be) gets nothing.
        answer = exchange(port, data.draw(http_bytes(reader)), half_close=False, timeout=1)
        if not answer:
            return  # closed without a word: allowed for garbage
        assert answer.startswith(b"HTTP/1.1 "), answer[:80]
        status = int(answer[9:12])
        statuses.add(status)
        assert status in (200, 400, 401, 404, 421, 503), answer[:200]
        assert b"Traceback" not in answer

    one()
    assert statuses & {200, 401}
    assert controller.proc is not None and controller.proc.poll() is None
    assert "Traceback" not in controller.logs()
    reply = httpx.get(f"http://{http}/api/status",
                      headers={"authorization": f"Bearer {reader}"})
    assert reply.status_code == 200


DEFINED = {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE,
           grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.RESOURCE_EXHAUSTED,
           grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED,
           grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.CANCELLED}


@st.composite
def grpc_calls(draw) -> tuple[str, bytes, tuple[tuple[str, str], ...]]:
    service = draw(st.sampled_from(["m.M", "grpc.health.v1.Health", "x", "a.b.C"]))
    method = draw(st.sampled_from(["Predict", "Check", "", "Watch", "ListApplications"]))
    path = draw(st.sampled_from([f"/{service}/{method}", "/", "//", f"/{service}"]))
    metadata = draw(st.lists(st.tuples(
        st.sampled_from(["application", "x-servefleet-caller", "x-servefleet-stream",
                         "authorization", "x-request-id", "grpc-timeout-ish"]),
        st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)),
        max_size=4))
    return path, draw(st.binary(max_size=512)), tuple(metadata)


def test_the_grpc_ingress_answers_garbage_with_defined_statuses(secured) -> None:
    _, proxy, _, grpc_port, _ = secured
    seen: set[grpc.StatusCode] = set()
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:

        @settings(FUZZ, max_examples=int(100 * SCALE))
        @given(grpc_calls())
        def one(case) -> None:
            path, raw, metadata = case
            call: Any = channel.unary_stream(path)
            try:
                for _ in call(raw, metadata=metadata, timeout=0.5):
                    pass
            except grpc.RpcError as e:
                seen.add(e.code())
                assert e.code() in DEFINED, (e.code(), e.details())
                assert "Traceback" not in (e.details() or "")
            except ValueError:
                pass  # metadata the client library itself refuses to send

        one()
    assert seen & {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE}
    assert proxy.proc is not None and proxy.proc.poll() is None
    assert "Traceback" not in proxy.logs()
    wait_for(lambda: httpx.get(proxy.url + "/-/healthz").text == "ok", 10, "the proxy")


def test_garbage_to_the_controllers_health_service_is_invalid_argument(secured) -> None:
    controller = secured[0]
    with grpc.insecure_channel(controller.address) as channel:
        check: Any = channel.unary_unary("/grpc.health.v1.Health/Check")
        with pytest.raises(grpc.RpcError) as refused:
            check(b"\x00", timeout=5)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, refused.value.details()
