"""The user's constructor runs on the replica's event loop, as Ray runs it
(replica/loader.py build_on_loop), while the control loop keeps answering."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import grpc
import pytest

from servefleet._private import replica_context
from servefleet.replica import loader
from servefleet.replica.control_loop import ControlLoop
from servefleet.replica.edge import ReplicaEdge, limits_from_env
from servefleet.replica.loop_watch import SAMPLE_S, LoopWatch
from servefleet.replica.main import control_server
from servefleet.replica.replica import PHASE, Replica, ReplicaSettings
from servefleet.v1 import replica_pb2, replica_pb2_grpc

APPS = str(Path(__file__).parent / "apps")


def replica_for(attr: str, init_args: list | None = None, control_port: int = 1) -> Replica:
    return Replica(ReplicaSettings(
        cluster="t", application="a", deployment="d", replica_id="r1", version="v1",
        host="127.0.0.1", control_port=control_port, http_port=1,
        import_path=f"constructor_loop_app:{attr}", working_dir=APPS,
        init_args_json=json.dumps(init_args or [])))


@pytest.fixture(autouse=True)
def _forget_identity():
    yield
    replica_context.clear()


async def test_a_plain_constructor_may_start_tasks_on_the_replicas_loop() -> None:
    replica = replica_for("StartsATask")
    await replica.load()
    assert replica.phase == PHASE.REPLICA_PHASE_READY, replica.error
    instance = replica.deployment.instance
    assert instance.loop is asyncio.get_running_loop()
    await asyncio.sleep(0.1)
    assert instance.ticks > 1  # the task it started runs on this loop
    instance.task.cancel()
    replica.executor.shutdown()


async def test_an_async_constructor_is_awaited() -> None:
    replica = replica_for("AwaitsInInit", [7])
    await replica.load()
    assert replica.phase == PHASE.REPLICA_PHASE_READY, replica.error
    assert replica.deployment.instance.value == 7
    assert replica.deployment.instance.loop is asyncio.get_running_loop()
    replica.executor.shutdown()


def test_build_in_a_thread_refuses_an_async_constructor() -> None:
    cls = loader.import_attr("constructor_loop_app:AwaitsInInit", APPS)
    with pytest.raises(loader.LoadError, match="async def"):
        loader.build(cls, [1], {}, False)


async def test_the_controller_is_answered_while_a_slow_constructor_holds_the_loop(
        caplog) -> None:
    from servefleet._private.testing import free_port

    port = free_port()
    replica = replica_for("Slow", [1.5], control_port=port)
    watch = LoopWatch()
    watch.start()
    replica.loop_watch = watch
    control = ControlLoop(asyncio.get_running_loop())
    edge = ReplicaEdge(limits_from_env({}, open_files=1024))
    await control.start(lambda: control_server(replica, control, watch, None, edge))
    control.repeat(SAMPLE_S, watch.sample)
    phases: list[tuple[int, float]] = []

    def ask() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = replica_pb2_grpc.ReplicaServiceStub(channel)
            time.sleep(0.6)  # the constructor is under way by now
            began = time.monotonic()
            meta = stub.GetMetadata(replica_pb2.GetMetadataRequest(), timeout=5)
            phases.append((meta.phase, time.monotonic() - began))

    asker = threading.Thread(target=ask)
    asker.start()
    try:
        await asyncio.sleep(0.05)
        await replica.load()
        await asyncio.sleep(0.4)  # the loop watch's next beat
    finally:
        await asyncio.to_thread(asker.join)
        await control.stop(0)
        replica.executor.shutdown()
    assert replica.phase == PHASE.REPLICA_PHASE_READY, replica.error
    (phase, took), = phases
    assert phase == PHASE.REPLICA_PHASE_LOADING
    assert took < 1.0, f"answered only after the constructor, in {took:.1f} s"
    # An expected hold: not reported as a handler blocking the loop.
    assert not [r for r in caplog.records if "event loop was blocked" in r.getMessage()]


def test_a_replica_stopped_while_its_constructor_runs_exits_at_once(tmp_path) -> None:
    """The constructor holds the replica's loop, where SIGTERM is handled:
    nothing is served yet, so the signal ends the process there and then."""
    import signal
    import subprocess

    from servefleet._private.testing import ReplicaProcess

    replica = ReplicaProcess(tmp_path, "constructor_loop_app:Slow", working_dir=APPS,
                             init_args_json="[60]", graceful_shutdown_timeout_s=30)
    try:
        replica.wait_phase(PHASE.REPLICA_PHASE_LOADING)
        time.sleep(0.5)  # in the constructor by now
        began = time.monotonic()
        replica.proc.send_signal(signal.SIGTERM)
        try:
            code = replica.proc.wait(10)
        except subprocess.TimeoutExpired:
            raise AssertionError("still running 10 s after SIGTERM") from None
        assert code == 0 and time.monotonic() - began < 5
    finally:
        replica.close()
