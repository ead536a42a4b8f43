"""The replica's loop watch and its control loop, in this process: a handler
that blocks the main loop is named in a warning, and the control server,
on a loop of its own, answers health checks meanwhile (failing them only
once the loop has been held past the check's own timeout)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import grpc
import pytest

from servefleet.replica.control_loop import ControlLoop
from servefleet.replica.edge import ReplicaEdge, limits_from_env
from servefleet.replica.loop_watch import SAMPLE_S, LoopWatch
from servefleet.replica.main import control_server
from servefleet.replica.replica import PHASE, Replica, ReplicaSettings
from servefleet.v1 import replica_pb2, replica_pb2_grpc


async def holds_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # noqa: ASYNC251 - the mistake under test


def sampled(watch: LoopWatch) -> threading.Event:
    """Run the watch's sampler on a thread of its own until the event is set."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(SAMPLE_S):
            watch.sample()
    threading.Thread(target=run, daemon=True).start()
    return stop


async def test_a_handler_that_holds_the_loop_is_named_once_a_minute(caplog) -> None:
    caplog.set_level(logging.WARNING, "servefleet.replica")
    watch = LoopWatch()
    watch.start()
    stop = sampled(watch)
    try:
        await asyncio.sleep(0.3)
        await holds_the_loop(1.5)
        await asyncio.sleep(0.4)  # the late beat
        await holds_the_loop(1.3)  # the same handler again: counted, not logged
        await asyncio.sleep(0.4)
    finally:
        stop.set()
    warnings = [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "blocked for 1." in warnings[0]
    assert "holds_the_loop (test_loop_watch.py:" in warnings[0]
    assert "plain def" in warnings[0] and "run_in_executor" in warnings[0]
    assert watch.blocked_for() == 0.0


async def test_a_short_hold_is_not_worth_a_warning(caplog) -> None:
    caplog.set_level(logging.WARNING, "servefleet.replica")
    watch = LoopWatch()
    watch.start()
    await asyncio.sleep(0.3)
    await holds_the_loop(0.5)
    await asyncio.sleep(0.4)
    assert not [r for r in caplog.records if "event loop" in r.getMessage()]


@pytest.fixture
async def control(tmp_path):
    """A ready replica (no user code) whose control server runs on its own
    loop, as replica/main.py starts it; yields (stub target, watch)."""
    from servefleet._private.testing import free_port

    port = free_port()
    replica = Replica(ReplicaSettings(
        cluster="t", application="a", deployment="d", replica_id="r1", version="v1",
        host="127.0.0.1", control_port=port, http_port=1, import_path="m:C"))
    replica.phase = PHASE.REPLICA_PHASE_READY
    watch = LoopWatch()
    watch.start()
    loop = ControlLoop(asyncio.get_running_loop())
    edge = ReplicaEdge(limits_from_env({}, open_files=1024))
    await loop.start(lambda: control_server(replica, loop, watch, None, edge))
    loop.repeat(SAMPLE_S, watch.sample)
    try:
        yield f"127.0.0.1:{port}", watch
    finally:
        await loop.stop(0)
        replica.executor.shutdown()


def check_health_in_a_thread(target: str, timeout: float) -> tuple[threading.Thread, list]:
    """CheckHealth from another thread (this loop is about to be held);
    the result is (status code, details, seconds it took)."""
    out: list = []

    def call() -> None:
        with grpc.insecure_channel(target) as channel:
            stub = replica_pb2_grpc.ReplicaServiceStub(channel)
            began = time.monotonic()
            try:
                stub.CheckHealth(replica_pb2.CheckHealthRequest(), timeout=timeout)
                out.append((grpc.StatusCode.OK, "", time.monotonic() - began))
            except grpc.RpcError as e:
                out.append((e.code(), e.details(), time.monotonic() - began))
    thread = threading.Thread(target=call)
    thread.start()
    return thread, out


async def test_health_is_answered_while_a_handler_holds_the_loop(control) -> None:
    """A 3 s hold: a check with a 5 s deadline passes, answered at once."""
    target, _ = control
    await asyncio.sleep(0.3)
    thread: threading.Thread | None = None
    out: list = []

    async def handler() -> None:
        nonlocal thread, out
        time.sleep(0.5)  # noqa: ASYNC251
        thread, out = check_health_in_a_thread(target, 5.0)
        time.sleep(2.5)  # noqa: ASYNC251
    await handler()
    assert thread is not None
    thread.join()
    code, details, took = out[0]
    assert code == grpc.StatusCode.OK, details
    assert took < 2.0, f"answered only when the loop was free, after {took:.1f} s"


async def test_a_loop_held_past_the_checks_deadline_fails_it_with_the_reason(control) -> None:
    target, _ = control
    await asyncio.sleep(0.3)
    out: list = []

    async def stuck_handler() -> None:
        nonlocal out
        time.sleep(1.6)  # noqa: ASYNC251
        thread, out = check_health_in_a_thread(target, 1.0)
        thread.join()

    await stuck_handler()
    code, details, _ = out[0]
    assert code == grpc.StatusCode.FAILED_PRECONDITION, details
    assert "event loop has been blocked for 1." in details
    assert "stuck_handler (test_loop_watch.py:" in details
