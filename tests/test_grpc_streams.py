"""Client-streaming and bidirectional gRPC for real: a controller, replicas
serving tests/apps/streams_app.py, and a proxy with --grpc-listen (the
proxyless side: tests/test_xds.py)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import grpc
import httpx
import pytest

from servefleet._private.testing import wait_for
from servefleet._private.wire import ADMITTED_METADATA_KEY
from servefleet.client import ControllerClient
from servefleet.v1 import replica_pb2, status_pb2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import grpc_stream_calls as calls  # noqa: E402
from grpc_streams import streams_pb2_grpc as pb_grpc  # noqa: E402

pytestmark = pytest.mark.slow
APP = (("application", "streams"),)


def _deployed(client: ControllerClient, marks: Path, stub, **kwargs) -> None:
    client.deploy_applications([calls.streams_application(marks, **kwargs)])

    def running() -> bool:
        info = client.application_status("streams")
        return info is not None and info.status == status_pb2.APPLICATION_STATUS_RUNNING

    def answers() -> bool:
        try:
            return calls.echo(stub, APP, n=2) == [0, 1]
        except grpc.RpcError:
            return False

    wait_for(running, 90, "streams RUNNING")
    wait_for(answers, 30, "the gRPC route at the proxy")


def test_streams_both_ways_with_back_pressure_and_cancellation(grpc_cluster,
                                                               tmp_path) -> None:
    client, _, target = grpc_cluster
    marks = tmp_path / "marks"
    marks.mkdir()
    channel = grpc.insecure_channel(target)
    stub = pb_grpc.StreamsStub(channel)
    _deployed(client, marks, stub)

    # 10,000 messages of 16 KiB up; the replica stops reading after 100 until
    # told to read on, and the client stops too once every hop's flow-control
    # window is full (~700 messages here), far from the 10,000 it would send
    # without back-pressure.
    for method in ("Upload", "UploadSync"):
        summary, ahead = calls.upload_with_back_pressure(stub, APP, marks, method=method)
        assert (summary.count, summary.bytes, summary.in_order) == (10_000, 163_840_000, True)
        print(f"{method}: the client stopped after {ahead} messages while the replica waited")
        assert 100 <= ahead < 5000, f"{method}: {ahead} messages sent while the replica waited"

    # 1,000 messages both ways, in order, from async and sync generators.
    assert calls.echo(stub, APP, method="Echo") == list(range(1000))
    assert calls.echo(stub, APP, method="EchoSync") == list(range(1000))

    # The client cancels: the replica's call ends (async code cancelled,
    # a thread waiting for the next message let go).
    calls.cancel_held(stub, APP, "gone-async", "Upload")
    calls.cancel_held(stub, APP, "gone-sync", "UploadSync")
    wait_for(lambda: (marks / "gone-async").exists() and (marks / "gone-sync").exists(), 10,
             "the cancellations reaching the replica")
    # A deadline does the same.
    with pytest.raises(grpc.RpcError) as late:
        stub.Upload(calls.chunks(1, 16, "hold", then=None), timeout=1,
                    metadata=(*APP, ("x-request-id", "deadline-1")))
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: (marks / "deadline-1").exists(), 10, "the deadline reaching the replica")

    # The replica ends the call: the client gets its status and stops sending.
    code, details, echoes, sent = calls.stopped_by_the_replica(stub, APP, "stop@5")
    assert (code, details, echoes) == (grpc.StatusCode.ABORTED, "stopped after 5 chunks", 5)
    assert sent < 100_000, f"the client sent {sent} messages after the call ended"
    code, details, _, sent = calls.stopped_by_the_replica(stub, APP, "fail@3", "Upload")
    assert code == grpc.StatusCode.UNKNOWN and "ValueError: failed after 3 chunks" in details
    assert sent < 100_000
    channel.close()


def test_a_full_replica_refuses_before_any_message_and_the_call_goes_whole_elsewhere(
        grpc_cluster, tmp_path) -> None:
    client, proxy, target = grpc_cluster
    channel = grpc.insecure_channel(target)
    stub = pb_grpc.StreamsStub(channel)
    _deployed(client, tmp_path, stub, replicas=2, max_ongoing=1)
    wait_for(lambda: len([r for r in client.replicas("streams", "Streams")
                          if r.state == replica_pb2.REPLICA_STATE_RUNNING]) == 2, 60,
             "2 replicas running")
    full, free = client.replicas("streams", "Streams")
    # Fill one replica behind the proxy's back: the proxy still sees room there.
    direct = grpc.insecure_channel(full.record.grpc_address)
    release = threading.Event()
    held = pb_grpc.StreamsStub(direct).Upload.future(calls.chunks(1, 16, "", then=release),
                                                    timeout=60)
    # Admitted (the replica says so in its initial metadata) before the proxy's
    # calls start: else the first of them could take the slot and be answered there.
    assert dict(held.initial_metadata()).get(ADMITTED_METADATA_KEY)
    try:
        for _ in range(12):
            summary = stub.Upload(calls.chunks(50, 1000, ""), metadata=APP, timeout=30)
            assert (summary.count, summary.in_order) == (50, True)
            assert summary.replica == free.record.handle.split(":")[0]
    finally:
        release.set()
    assert held.result(timeout=30).count == 1
    metrics = httpx.get(proxy.url + "/-/metrics", timeout=10).text
    retried = [line for line in metrics.splitlines()
               if line.startswith("servefleet_retries_total{") and 'application="streams"'
               in line and not line.endswith(" 0.0")]
    assert retried, "no call was refused and retried"
    direct.close()
    channel.close()
