"""A load reporter names the replica sets it routes by: all of them on each new
stream (a stream that ended, a new leader), then what changed; a draining
process names none. Real grpc.aio servers in this process record the reports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import grpc

from servefleet._private.dataplane.load_report import LoadReporter
from servefleet._private.dataplane.replica_sets import ReplicaSets
from servefleet._private.dataplane.upstream import UpstreamPool
from servefleet._private.security.tls import Credentials
from servefleet._private.wire import replicas_key
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, watch_pb2


class Recorder(controller_pb2_grpc.ControllerServiceServicer):
    """A leader that keeps the `applied` part of each report; `end_after`
    ends the stream after the next report."""

    def __init__(self) -> None:
        self.applied: list[tuple[bool, dict[str, str]]] = []
        self.end_after = False
        # Set: the stream is refused, as for a token without the reporter role.
        self.refuse = False
        # When each stream came (the loop's clock).
        self.streams: list[float] = []

    async def StreamLoad(self, requests: Any, context: Any) -> api.StreamLoadResponse:
        self.streams.append(asyncio.get_running_loop().time())
        if self.refuse:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not a reporter")
        async for message in requests:
            report = message.report
            if report.HasField("applied"):
                self.applied.append((report.applied.replace,
                                     dict(report.applied.snapshot_ids)))
            if self.end_after:
                self.end_after = False
                break
        return api.StreamLoadResponse()


async def leader() -> tuple[grpc.aio.Server, str, Recorder]:
    recorder = Recorder()
    server = grpc.aio.server()
    controller_pb2_grpc.add_ControllerServiceServicer_to_server(recorder, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}", recorder


def snapshot(deployment: str, snapshot_id: str, deleted: bool = False) -> watch_pb2.Snapshot:
    replicas = watch_pb2.ReplicaSet(application="app", deployment=deployment, endpoints=[
        watch_pb2.ReplicaEndpoint(replica_id=f"{deployment}-1", http_address="127.0.0.1:9")])
    return watch_pb2.Snapshot(key=replicas_key("app", deployment), snapshot_id=snapshot_id,
                              deleted=deleted, replicas=None if deleted else replicas)


async def next_applied(recorder: Recorder, seen: int) -> tuple[bool, dict[str, str]]:
    for _ in range(500):
        if len(recorder.applied) > seen:
            return recorder.applied[seen]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no report naming sets after {recorder.applied}")


def watching(address: str) -> Any:
    """The WatchClient a reporter asks: connected, its leader at `address`."""
    watcher = SimpleNamespace(watcher_id="proxy-t", connected=asyncio.Event(),
                              credentials=Credentials(), address=address)
    watcher.leader_address = lambda: watcher.address
    watcher.connected.set()
    return watcher


@contextlib.asynccontextmanager
async def reporting(period_s: float, refused: bool = False) -> AsyncIterator[SimpleNamespace]:
    """Two leaders (the first refusing reports when `refused`) and a reporter
    running over a replica set of A at a1, watching the first leader."""
    first, first_address, one = await leader()
    second, second_address, two = await leader()
    one.refuse = refused
    watcher = watching(first_address)
    sets = ReplicaSets(UpstreamPool())
    sets.apply(snapshot("A", "a1"))
    reporter = LoadReporter(watcher, period_s=period_s)  # type: ignore[arg-type]
    sets.on_applied = reporter.wake
    running = asyncio.create_task(reporter.run(sets))
    try:
        yield SimpleNamespace(one=one, two=two, second_address=second_address,
                              watcher=watcher, sets=sets, reporter=reporter)
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await first.stop(None)
        await second.stop(None)


def test_sets_go_whole_on_each_new_stream_then_as_changes() -> None:
    async def main() -> None:
        async with reporting(0.05) as r:
            one, two, sets = r.one, r.two, r.sets
            assert await next_applied(one, 0) == (True, {"app/A": "a1"})
            sets.apply(snapshot("A", "a2"))
            assert await next_applied(one, 1) == (False, {"app/A": "a2"})
            one.end_after = True  # the stream ends after this report
            sets.apply(snapshot("B", "b1"))
            assert await next_applied(one, 2) == (False, {"app/B": "b1"})
            sets.apply(snapshot("A", "", deleted=True))
            # A new stream: every set again, the deleted one left out.
            assert await next_applied(one, 3) == (True, {"app/B": "b1"})
            r.watcher.address = r.second_address  # a new leader hears them all
            assert await next_applied(two, 0) == (True, {"app/B": "b1"})
            r.reporter.leave()  # draining: it routes by no set
            assert await next_applied(two, 1) == (False, {"app/B": ""})
            await asyncio.sleep(0.2)
            assert len(one.applied) == 4 and len(two.applied) == 2  # nothing more to say

    asyncio.run(main())


def test_a_refused_stream_is_tried_again_after_a_backoff_and_at_once_on_a_new_leader() -> None:
    """A leader that refuses the reports (a token without the reporter role) is
    not asked again every period, only after REFUSED_BACKOFF_S (1 s, then 2 s);
    a new leader is asked at once."""
    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with reporting(0.02, refused=True) as r:
            one, two = r.one, r.two
            deadline = loop.time() + 10
            while len(one.streams) < 2:
                assert loop.time() < deadline, "no second try"
                await asyncio.sleep(0.02)
            # 1 s between the tries, not one 20 ms period (50 tries a second before).
            assert one.streams[1] - one.streams[0] >= 0.9
            assert one.applied == []
            # The next wait is 2 s; a new leader is asked within a few periods.
            switched = loop.time()
            r.watcher.address = r.second_address
            deadline = switched + 1.5
            while not two.applied:
                assert loop.time() < deadline, "the new leader was not asked at once"
                await asyncio.sleep(0.01)
            assert two.applied[0] == (True, {"app/A": "a1"})
            assert len(one.streams) == 2

    asyncio.run(main())
