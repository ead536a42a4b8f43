"""Fuzzing every port a replica opens (issue 52): random and mutated input to
the HTTP port (requests, handle calls, WebSocket upgrades), the user's gRPC
port, the control port and the metrics port of a REAL replica of a real
controller (process runtime) in a cluster with tokens.

Without a valid pass (none, forged, another cluster's, huge, duplicated, a
proxy's for handle calls) every port must refuse before reading anything:
no user code runs (tests/apps/recorder_app.py leaves a file per call), no
body is unpickled (a planted pickle would create a file). With an admin's
pass the fuzz reaches what is behind the gate. Either way: defined answers
(HTTP statuses with a message, gRPC statuses), never a traceback in the
replica's log or an answer, and the replica stays up and serves a good
request afterwards. What the fuzz found is pinned by a test each, at the
end. The controller's API and the proxy: test_fuzz.py, test_fuzz_surfaces.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from replica_fuzz_inputs import (
    CONTROL_PATHS,
    GRPC_PATHS,
    REFUSED_HTTP,
    frame,
    grpc_calls,
    h2_frames,
    head_lines,
    http_requests,
    send,
    status_of,
    upgrades,
)
from test_fuzz import SCALE

from servefleet._private.security import tokens
from servefleet._private.security.hop import HopIssuer, HopKey
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import replica_pb2

# Hypothesis warns (an error here) when the global `random` changes while it
# draws a case; a thread an earlier test left in this process can do that.
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings(
    "ignore:Do not use the `random` module inside strategies")]
APPS = str(Path(__file__).parent / "apps")
FUZZ = settings(max_examples=int(300 * SCALE), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])
SERVICERS = ["grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server",
             "grpc_streams.streams_pb2_grpc:add_StreamsServicer_to_server"]


@dataclass
class Replica:
    http: int
    grpc: str
    control: str
    metrics: int
    pid: int
    log: Path
    marks: Path
    planted: Path
    admin_pass: str
    proxy_pass: str
    foreign_pass: str  # signed with a key of no cluster

    def marked(self) -> set[str]:
        return set(os.listdir(self.marks))

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()


@pytest.fixture(scope="module")
def replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replica]:
    tmp = tmp_path_factory.mktemp("fuzz-replica")
    token_file = tmp / "tokens"
    admin = tokens.create(token_file, "admin-1", "admin")
    proxy = tokens.create(token_file, "proxy-1", "proxy")
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster="fuzz-replica",
                                   log_dir=tmp, extra_args=["--auth-tokens", str(token_file),
                                                            "--allow-working-dir", "/"]).start()
    # Where the replica's user (nobody, --replica-user auto) may write.
    marks = Path(tempfile.mkdtemp(prefix="servefleet-fuzz-"))
    marks.chmod(0o777)
    client = ControllerClient([controller.address], timeout=30,
                              credentials=Credentials(token=admin))
    try:
        (marks / "calls").mkdir()
        (marks / "calls").chmod(0o777)
        client.deploy_applications([apb.ApplicationSpec(
            name="rec", import_path="recorder_app:build", route_prefix="/rec",
            args_json=json.dumps({"marks": str(marks / "calls")}),
            grpc_servicer_functions=SERVICERS, runtime=dpb.RuntimeOptions(working_dir=APPS))])
        wait_for(lambda: any(r.state == replica_pb2.REPLICA_STATE_RUNNING
                             for r in client.replicas("rec")), 90, "the replica")
        record = next(r.record for r in client.replicas("rec")
                      if r.state == replica_pb2.REPLICA_STATE_RUNNING)
        with ControllerClient([controller.address], timeout=30,
                              credentials=Credentials(token=proxy)) as proxy_client:
            proxy_pass = getattr(proxy_client.hop_pass(), "pass")
        foreign, _ = HopIssuer(HopKey.generate()).issue("token:admin-1", "admin")
        yield Replica(
            http=int(record.http_address.rpartition(":")[2]), grpc=record.grpc_address,
            control=record.control_address,
            metrics=int(record.metrics_address.rpartition(":")[2]),
            pid=int(record.handle.partition(":")[0]),  # pid:start time
            log=controller.runtime_dir / "fuzz-replica" / f"{record.replica_id}.log",
            marks=marks / "calls", planted=marks / "planted",
            admin_pass=getattr(client.hop_pass(), "pass"), proxy_pass=proxy_pass,
            foreign_pass=foreign)
    finally:
        with contextlib.suppress(grpc.RpcError):
            client.shutdown()  # the replica with it
        client.close()
        controller.stop()
        shutil.rmtree(marks, ignore_errors=True)


@pytest.fixture
def watched(replica: Replica) -> Iterator[Replica]:
    """The replica, checked after the test: alive, serving, and nothing in
    its log at ERROR or with a traceback since the test began."""
    before = len(replica.log_lines())
    yield replica
    os.kill(replica.pid, 0)  # still there
    reply = httpx.get(f"http://127.0.0.1:{replica.http}/ok",
                      headers={"x-servefleet-hop": replica.admin_pass}, timeout=10)
    assert reply.status_code == 200 and reply.text == "recorded GET 0", reply.text
    bad = [line for line in replica.log_lines()[before:]
           if " ERROR " in line or "Traceback" in line or " CRITICAL " in line]
    assert not bad, "\n".join(replica.log_lines()[before:])[-4000:]


# -- HTTP -------------------------------------------------------------------------------

def test_unauthenticated_http_is_refused_before_anything_is_read(watched: Replica) -> None:
    replica = watched
    marked = replica.marked()
    # Not a pass (forged, another cluster's, a signature cut), or a proxy's,
    # which may not make handle calls.
    wrong = ["sfh1.eyJrIjoiIn0.AAAA", replica.foreign_pass, replica.admin_pass[:-4] + "AAAA"]
    proxy_hop = b"x-servefleet-hop: " + replica.proxy_pass.lower().encode()
    statuses: set[int | None] = set()

    @FUZZ
    @given(st.data())
    def one(data) -> None:
        if data.draw(st.booleans()):
            raw = data.draw(http_requests(wrong, str(replica.planted)))
        elif data.draw(st.booleans()):  # a proxy's pass: not for handle calls
            raw = data.draw(http_requests([replica.proxy_pass], str(replica.planted),
                                          method_needed=True))
            lines = head_lines(raw)
            hops = [line for line in lines if line.startswith(b"x-servefleet-hop:")]
            if hops[:1] == [proxy_hop] and not any(
                    line.startswith(b"x-servefleet-method:") for line in lines):
                return  # a mutation made it a plain request, which a proxy may send
        else:
            raw = data.draw(upgrades(wrong))
        answer = send(replica.http, raw)
        assert not answer.startswith(b"HTTP/1.1 100 "), raw[:300]  # a body asked for
        status = status_of(answer)
        statuses.add(status)
        if status == 200:  # only an engine's health check, answered without a pass
            assert b"x-servefleet-check:" in b"\n".join(head_lines(raw)), raw[:300]
            assert answer.partition(b"\r\n\r\n")[2] in (b"ok", b""), answer  # b"": HEAD
        else:
            assert status is None or status in REFUSED_HTTP, (status, raw[:300])

    one()
    assert 401 in statuses
    assert replica.marked() == marked, "user code ran for an unauthenticated caller"
    assert not replica.planted.exists(), "a body was unpickled before the gate"


def test_authenticated_http_gets_defined_answers(watched: Replica) -> None:
    """With an admin's pass (handle calls allowed): behind the gate, bodies
    that are no frame, cut frames, frames of the wrong shape."""
    replica = watched
    statuses: set[int | None] = set()

    @FUZZ
    @given(st.data())
    def one(data) -> None:
        if data.draw(st.integers(0, 3)):
            raw = data.draw(http_requests([replica.admin_pass], "/nonexistent/planted"))
        else:
            raw = data.draw(upgrades([replica.admin_pass]))
        status = status_of(send(replica.http, raw))
        statuses.add(status)
        # 500s are the app's own errors, and this app raises none.
        assert status is None or status in REFUSED_HTTP | {101, 200}, (status, raw[:300])

    one()
    assert {200, 400} <= statuses


# -- gRPC ports ---------------------------------------------------------------------------

def grpc_status(channel: grpc.Channel, path: str, metadata: Any, messages: list[bytes]
                ) -> grpc.StatusCode:
    """Every call as bidirectional streaming with raw bytes: the server
    takes a unary call's one message the same way."""
    call: Any = channel.stream_stream(path)
    try:
        for _ in call(iter(messages), metadata=metadata, timeout=2):
            pass
    except grpc.RpcError as e:
        assert "Traceback" not in (e.details() or ""), e.details()
        return e.code()
    except ValueError:
        return grpc.StatusCode.OK  # metadata the client library itself refuses to send
    return grpc.StatusCode.OK


def test_unauthenticated_grpc_is_refused_before_anything_is_read(watched: Replica) -> None:
    """The user's gRPC port and the control port: UNAUTHENTICATED, whatever
    the path or the message, with no message parsed before the gate."""
    replica = watched
    marked = replica.marked()
    wrong = ["", "sfh1.eyJrIjoiIn0.AAAA", replica.foreign_pass, "x" * 2000]
    seen: dict[str, set[grpc.StatusCode]] = {"grpc": set(), "control": set()}
    with grpc.insecure_channel(replica.grpc) as user, \
            grpc.insecure_channel(replica.control) as control:

        @FUZZ
        @given(st.data())
        def one(data) -> None:
            if data.draw(st.booleans()):
                port, channel = "grpc", user
                path, metadata, messages = data.draw(grpc_calls(GRPC_PATHS, wrong))
            else:  # only a controller's pass is taken there: an admin's is refused too
                port, channel = "control", control
                path, metadata, messages = data.draw(grpc_calls(
                    CONTROL_PATHS, [*wrong, replica.admin_pass, replica.proxy_pass]))
            code = grpc_status(channel, path, metadata, messages)
            seen[port].add(code)
            assert code == grpc.StatusCode.UNAUTHENTICATED, (port, path, code)

        one()
    assert seen == {"grpc": {grpc.StatusCode.UNAUTHENTICATED},
                    "control": {grpc.StatusCode.UNAUTHENTICATED}}
    assert replica.marked() == marked, "user code ran for an unauthenticated caller"


def test_authenticated_grpc_gets_defined_statuses(watched: Replica) -> None:
    replica = watched
    defined = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT,
               grpc.StatusCode.UNIMPLEMENTED}
    seen: set[grpc.StatusCode] = set()
    with grpc.insecure_channel(replica.grpc) as channel:

        @FUZZ
        @given(grpc_calls(GRPC_PATHS, [replica.admin_pass]))
        def one(case) -> None:
            code = grpc_status(channel, *case)
            seen.add(code)
            assert code in defined, (case, code)

        one()
    assert {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT} <= seen


# -- raw bytes: HTTP/2 frames, the metrics port ---------------------------------------------

def test_raw_bytes_to_every_port_crash_nothing(watched: Replica) -> None:
    """HTTP/2 frames to both gRPC ports, garbage and mutated requests to the
    metrics port (open to anyone: numbers only)."""
    replica = watched
    ports = [int(replica.grpc.rpartition(":")[2]), int(replica.control.rpartition(":")[2])]
    metrics: set[int | None] = set()
    marked = replica.marked()

    @FUZZ
    @given(st.data())
    def one(data) -> None:
        choice = data.draw(st.integers(0, 2))
        if choice < 2:
            answer = send(ports[choice], data.draw(h2_frames()), timeout=1)
            assert b"Traceback" not in answer
            return
        raw = data.draw(st.one_of(st.binary(min_size=1, max_size=256),
                                  http_requests([], "/nonexistent/planted")))
        raw = raw.replace(b" /rec/x ", b" /metrics ", 1)
        status = status_of(send(replica.metrics, raw, half_close=False, timeout=1))
        metrics.add(status)
        assert status in (None, 200, 400, 404, 405, 408, 413, 414, 431), status

    one()
    assert 400 in metrics
    assert replica.marked() == marked, "user code ran for frames without a pass"
    assert b"servefleet_replica_requests_total" in httpx.get(
        f"http://127.0.0.1:{replica.metrics}/metrics", timeout=10).content


# -- what the fuzz found, one test each ----------------------------------------------------

def unary(address: str, path: str, message: bytes, metadata: Any = ()) -> tuple[Any, str]:
    with grpc.insecure_channel(address) as channel:
        call: Any = channel.unary_unary(path)
        try:
            call(message, metadata=metadata, timeout=10)
        except grpc.RpcError as e:
            return e.code(), e.details() or ""
    return grpc.StatusCode.OK, ""


def test_grpc_messages_are_not_parsed_before_the_gate(watched: Replica) -> None:
    """A message that is no protobuf, from a caller without a pass: gRPC
    parsed it before the gate saw the call (UNKNOWN, and a traceback in the
    replica's log for anyone who sends garbage)."""
    for path in ("/classifier.v1.Classifier/Predict", "/classifier.v1.Classifier/PredictStream"):
        code, details = unary(watched.grpc, path, b"\xff\xff\xff")
        assert code == grpc.StatusCode.UNAUTHENTICATED, (path, code, details)
    # The control port: its Guard parsed first (INVALID_ARGUMENT).
    code, details = unary(watched.control, "/servefleet.v1.ReplicaService/CheckHealth",
                          b"\xff\xff\xff")
    assert code == grpc.StatusCode.UNAUTHENTICATED, details
    assert "x-servefleet-hop" in details


def test_unknown_grpc_methods_are_refused_to_callers_without_a_pass(watched: Replica) -> None:
    """They got UNIMPLEMENTED: which services a replica serves, told to anyone."""
    for address, path in ((watched.grpc, "/x.Y/Z"),
                          (watched.control, "/servefleet.v1.ReplicaService/Nope")):
        code, _ = unary(address, path, b"")
        assert code == grpc.StatusCode.UNAUTHENTICATED, (path, code)
    code, _ = unary(watched.grpc, "/x.Y/Z", b"", (("x-servefleet-hop", watched.admin_pass),))
    assert code == grpc.StatusCode.UNIMPLEMENTED


def test_a_grpc_message_that_is_no_protobuf_is_invalid_argument(watched: Replica) -> None:
    """Behind the gate: it was UNKNOWN ("Unexpected DecodeError"), logged at
    ERROR with a traceback, as gRPC's own parsing or as a failure of the
    user's code for request streams."""
    metadata = (("x-servefleet-hop", watched.admin_pass),)
    before = len(watched.log_lines())
    with grpc.insecure_channel(watched.grpc) as channel:
        for path, kind in (("/classifier.v1.Classifier/Predict", "classifier.v1.PredictRequest"),
                           ("/classifier.v1.Classifier/PredictStream",
                            "classifier.v1.PredictRequest"),
                           ("/streams.v1.Streams/Upload", "streams.v1.Chunk"),
                           ("/streams.v1.Streams/EchoSync", "streams.v1.Chunk")):
            call: Any = channel.stream_stream(path)
            with pytest.raises(grpc.RpcError) as refused:
                list(call(iter([b"\xff\xff\xff"]), metadata=metadata, timeout=10))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, path
            assert f"the request is not a valid {kind}" in (refused.value.details() or "")
    assert not [line for line in watched.log_lines()[before:] if " ERROR " in line]


def test_a_handle_call_body_of_another_shape_is_a_bad_request(watched: Replica) -> None:
    """A frame that unpickles to no (args, kwargs): keyword names that are
    no strings failed in the call, a 500 and a traceback at ERROR as if the
    method had raised; a string as args was split into letters and run."""
    marked = watched.marked()
    value: tuple[object, object]
    for value in (((1,), {1: 2}), ("ab", {}), ((), [])):
        reply = httpx.post(f"http://127.0.0.1:{watched.http}/", content=frame(value),
                           headers={"x-servefleet-hop": watched.admin_pass,
                                    "x-servefleet-method": "record"}, timeout=10)
        assert reply.status_code == 400, (value, reply.status_code)
        assert reply.json()["error"].startswith("bad handle call body: TypeError: expected "
                                                "(args, kwargs)"), reply.text
    assert watched.marked() == marked


def test_a_caller_leaving_while_its_body_is_read_is_no_failure(watched: Replica) -> None:
    """A request whose body never all comes (the client left): reading it
    raised ClientDisconnect, logged as a failure of user code with a
    traceback at ERROR."""
    before = len(watched.log_lines())
    raw = (b"POST /x HTTP/1.1\r\nhost: a\r\ncontent-length: 100\r\nx-servefleet-hop: " +
           watched.admin_pass.encode() + b"\r\n\r\nhello")
    send(watched.http, raw)  # and closes its side
    # The replica's note: its app cancelled as the connection closed (an
    # ASGI app: replica/asgi_calls.py), or the body's reader told of it.
    wait_for(lambda: any("the caller went away" in line
                         for line in watched.log_lines()[before:]), 10, "the replica's note")
    assert not [line for line in watched.log_lines()[before:] if " ERROR " in line]
