"""Every port a replica opens (issue 52), against a REAL replica of a real
controller (process runtime) in a cluster with tokens: what fuzzing them
found, one test each (tests/apps/recorder_app.py leaves a file per call
of user code). The fuzz itself: test_fuzz_replica's fuzz tests, to come.
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
from replica_fuzz_inputs import frame, send

from servefleet._private.security import tokens
from servefleet._private.security.hop import HopIssuer, HopKey
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import replica_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
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
    assert send(watched.http, raw) == b""
    wait_for(lambda: any("went away before its body came" in line
                         for line in watched.log_lines()[before:]), 10, "the replica's note")
    assert not [line for line in watched.log_lines()[before:] if " ERROR " in line]
