"""The bounds on the ControllerService's streams, against a real grpc.aio server
and client in this process: a Watch client that does not read is cut off
with RESOURCE_EXHAUSTED (one that reads is not) and its stream freed; a
load-report stream carries one reporter, and reporters that stop reporting
are forgotten at the next report."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import tracemalloc
from typing import Any, cast

import grpc
import pytest
from fakes import FakeClock
from test_stream_bounds import SMALL_WINDOW, ended, eventually, refuse_not_leading, serving

from servefleet.controller.api.servicer import ControllerServicer
from servefleet.controller.drain_fence import DrainFence
from servefleet.controller.load_reports import STALE_S, LoadReports
from servefleet.controller.term import LeaderTerm
from servefleet.controller.watch import Publisher
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, watch_pb2


class Term:
    """What Watch and StreamLoad use of a leader term."""

    record_load = LeaderTerm.record_load

    def __init__(self) -> None:
        self.publisher = Publisher()
        self.load_reports = LoadReports()
        self.fence = DrainFence()


class Leading:
    def can_serve(self) -> bool:
        return True

    async def abort_not_leader(self, context: Any) -> None:
        await refuse_not_leading(context)


def controller_service(term: Term) -> tuple[Any, Any]:
    servicer = ControllerServicer("test", cast(Any, Leading()), lambda: cast(Any, term),
                                  cast(Any, None), lambda: None)
    return controller_pb2_grpc.add_ControllerServiceServicer_to_server, servicer


async def test_a_watch_client_that_does_not_read_is_cut_off() -> None:
    term = Term()
    for i in range(100):  # ~12 KB each: far more than the client's window
        term.publisher.publish(f"replicas/app/D{i}", replicas=watch_pb2.ReplicaSet(endpoints=[
            watch_pb2.ReplicaEndpoint(replica_id=f"r{j}", http_address="h" * 100)
            for j in range(100)]))
    async with serving(controller_service(term)) as address, \
            grpc.aio.insecure_channel(address, options=SMALL_WINDOW) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        silent, reading = (stub.Watch(watch_pb2.WatchRequest(
            watcher_id=name, known={"replicas/": ""}, heartbeat_s=0.1))
            for name in ("silent", "reading"))
        got = 0

        async def read() -> None:
            nonlocal got
            while await reading.read() is not grpc.aio.EOF:
                got += 1

        reader = asyncio.create_task(read())
        await eventually(lambda: [w.watcher_id for w in term.publisher.watchers.values()]
                         == ["reading"])
        assert not reader.done() and got > 100  # snapshots, then heartbeats
        error = await ended(silent)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "does not read its stream" in (error.details() or "")
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


async def test_a_load_stream_carries_one_reporter() -> None:
    term = Term()
    async with serving(controller_service(term)) as address, \
            grpc.aio.insecure_channel(address) as channel:
        call = controller_pb2_grpc.ControllerServiceStub(channel).StreamLoad()
        for reporter in ("proxy-1", "proxy-1", "proxy-2"):
            await call.write(api.StreamLoadRequest(report=api.ReportLoadRequest(
                reporter_id=reporter, queued={"app/D": 1})))
        await call.done_writing()
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.value.details() or "").startswith("report.reporter_id: ")
    assert term.load_reports.queued("app", "D") == 1


def test_reporters_that_stop_reporting_are_forgotten_at_the_next_report() -> None:
    clock = FakeClock()
    reports = LoadReports(clock)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(200):  # reporters that come and go, each naming replicas
            reports.record(f"gone-{i}", {"app/D": 1},
                           ejected=[f"replica-{i}-{j}" for j in range(500)])
        held = tracemalloc.get_traced_memory()[0] - before
        clock.advance(STALE_S)
        reports.record("live", {"app/D": 2})
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held > 5_000_000 and kept < 500_000, (held, kept)
    assert reports.suspects() == set()
