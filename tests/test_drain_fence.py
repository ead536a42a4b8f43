"""The drain fence: a replica drains once no reporter routes by a set that holds it."""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeClock

from servefleet.controller.drain_fence import HISTORY, MAX_WAIT_S, STALE_S, DrainFence
from servefleet.controller.errors import InvalidArgument
from servefleet.v1 import controller_pb2 as api

KEY = ("app", "Model")


def fence(clock: FakeClock, watching: set[str]) -> DrainFence:
    made = DrainFence(clock, lambda: watching)
    made.published(KEY, "s1", ["r1", "r2"])
    made.published(KEY, "s2", ["r2"])  # r1 left the set
    return made


def name(f: DrainFence, reporter: str, ids: dict[str, str], replace: bool = False) -> None:
    f.reported(reporter, f.check(api.AppliedReplicaSets(snapshot_ids=ids)), replace)


def test_a_replica_is_held_while_a_watching_reporter_routes_by_a_set_with_it() -> None:
    f = fence(FakeClock(), {"p1", "p2", "p3"})
    name(f, "p1", {"app/Model": "s1"}, replace=True)
    name(f, "p2", {"app/Model": "s2"}, replace=True)
    name(f, "p3", {"app/Other": "x"}, replace=True)  # routes nowhere in app/Model
    assert f.holding(KEY, "r1") == ["p1"]
    assert f.holding(KEY, "r2") == ["p1", "p2"]
    name(f, "p1", {"app/Model": "s2"})  # what changed
    assert f.holding(KEY, "r1") == []
    name(f, "p2", {"app/Model": ""})  # no longer routed
    assert f.holding(KEY, "r2") == ["p1"]


def test_replace_drops_every_set_named_before() -> None:
    f = fence(FakeClock(), {"p1"})
    name(f, "p1", {"app/Model": "s1", "app/Other": "x"}, replace=True)
    name(f, "p1", {"app/Other": "y"})  # a change: app/Model stays
    assert f.holding(KEY, "r1") == ["p1"]
    name(f, "p1", {"app/Other": "y"}, replace=True)  # a new stream's first report
    assert f.holding(KEY, "r1") == []
    name(f, "p1", {"app/Model": "s1"})
    name(f, "p1", {}, replace=True)  # a draining proxy: it routes by nothing
    assert f.holding(KEY, "r2") == []


def test_a_set_this_leader_did_not_publish_may_hold_the_replica() -> None:
    f = fence(FakeClock(), {"p1", "p2"})
    name(f, "p1", {"app/Model": "from-the-last-term"}, replace=True)
    name(f, "p2", {"app/Model": "s2"}, replace=True)
    assert f.holding(KEY, "r1") == ["p1"]
    f.removed(KEY)  # the deployment is gone: s2 is no set this leader knows now
    assert f.holding(KEY, "r1") == ["p1", "p2"]


def test_old_sets_are_forgotten_past_the_history() -> None:
    f = fence(FakeClock(), {"p1"})
    name(f, "p1", {"app/Model": "s2"}, replace=True)
    for i in range(HISTORY - 1):
        f.published(KEY, f"later-{i}", ["r3"])
    assert f.holding(KEY, "r1") == []  # s2 is still remembered: r1 is not in it
    f.published(KEY, "one-more", ["r3"])
    assert f.holding(KEY, "r1") == ["p1"]  # s2 unknown now: it may hold anything


def test_only_reporters_with_a_watch_stream_count_and_the_gone_are_forgotten() -> None:
    clock = FakeClock()
    watching = {"p1", "p2"}
    f = fence(clock, watching)
    for reporter in ("p1", "p2"):
        name(f, reporter, {"app/Model": "s1"}, replace=True)
    watching.discard("p2")  # killed: it hears of no change, waiting for it is no use
    assert f.holding(KEY, "r1") == ["p1"]
    watching.add("p2")  # its stream came back before STALE_S: what it named counts again
    assert f.holding(KEY, "r1") == ["p1", "p2"]
    watching.discard("p2")
    clock.advance(STALE_S)
    f.reported("p1", None)  # any report sweeps (at most once a second)
    watching.add("p2")
    assert f.holding(KEY, "r1") == ["p1"]  # p2 was forgotten; p1, silent but watching, was not
    f.reported("p9", None)  # a reporter that never named a set is not waited for
    watching.add("p9")
    assert f.holding(KEY, "r1") == ["p1"]


def test_a_report_without_applied_keeps_what_its_reporter_named() -> None:
    clock = FakeClock()
    watching: set[str] = set()
    f = fence(clock, watching)
    name(f, "p1", {"app/Model": "s1"}, replace=True)
    clock.advance(STALE_S - 1)
    f.reported("p1", None)  # a load report that names no set: p1 is heard from
    clock.advance(2)
    f.reported("p2", None)  # sweeps: p1 reported 2 s ago, it stays
    watching.add("p1")
    assert f.holding(KEY, "r1") == ["p1"]


def test_bad_applied_sets_are_refused_naming_the_entry() -> None:
    f = DrainFence(FakeClock())
    for bad, named in (({"no-slash": "s"}, "applied.snapshot_ids['no-slash']"),
                       ({"app/Model": "x" * 65}, "at most 64"),
                       ({"app/bad name": "s"}, "applied.snapshot_ids['app/bad name']")):
        with pytest.raises(InvalidArgument, match=named.replace("[", r"\[")):
            f.check(api.AppliedReplicaSets(snapshot_ids=bad))


def test_wait_ends_as_holders_let_go_or_at_its_bound() -> None:
    async def run_until(clock: FakeClock, task: asyncio.Task[list[str]],
                        step: float = 0.25) -> None:
        while not task.done():
            await asyncio.sleep(0)
            clock.advance(step)

    async def main() -> None:
        clock = FakeClock()
        watching = {"p1", "p2", "p3"}
        f = fence(clock, watching)
        name(f, "p1", {"app/Model": "s1"}, replace=True)
        name(f, "p2", {"app/Model": "next"}, replace=True)  # not published yet
        name(f, "p3", {"app/Model": "s1"}, replace=True)
        started = clock.monotonic()
        waiting = asyncio.create_task(f.wait(KEY, "r1", 30.0))
        for _ in range(5):
            await asyncio.sleep(0)
            clock.advance(0.1)
        assert not waiting.done()
        name(f, "p1", {"app/Model": "s2"})  # it applied the set without r1
        f.published(KEY, "next", ["r2"])  # p2's set turns out to be without r1
        watching.discard("p3")  # p3's stream closed
        await run_until(clock, waiting)
        assert await waiting == [] and clock.monotonic() - started < 2.0

        name(f, "p1", {"app/Model": "s1"})
        started = clock.monotonic()
        bounded = asyncio.create_task(f.wait(KEY, "r1", 30.0))
        await run_until(clock, bounded)
        assert await bounded == ["p1"]
        assert MAX_WAIT_S <= clock.monotonic() - started <= MAX_WAIT_S + 0.5
        started = clock.monotonic()
        short = asyncio.create_task(f.wait(KEY, "r1", 1.0))  # the replica's own, shorter
        await run_until(clock, short)
        assert await short == ["p1"] and clock.monotonic() - started <= 1.5

    asyncio.run(main())


def test_a_reporter_on_several_sets_holds_what_any_of_them_holds() -> None:
    """An xDS client between responses, present while its own stream is open."""
    f = fence(FakeClock(), set())
    f.stream_opened("xds#1")
    f.reported("xds#1", {KEY: ("s1", "s2")}, replace=True, stream=True)
    assert f.holding(KEY, "r1") == ["xds#1"]  # s1 holds it
    f.reported("xds#1", {KEY: ("s2",)}, stream=True)
    assert f.holding(KEY, "r1") == [] and f.holding(KEY, "r2") == ["xds#1"]
    f.reported("xds#1", {KEY: ()}, stream=True)  # none: no longer routed
    assert f.holding(KEY, "r2") == []
    f.reported("xds#1", {KEY: "s2"}, stream=True)
    # A load report that names the stream's id (a client's choice) changes nothing.
    name(f, "xds#1", {"app/Model": ""}, replace=True)
    assert f.holding(KEY, "r2") == ["xds#1"]
    f.stream_closed("xds#1")
    assert f.holding(KEY, "r2") == [] and f._routes == {} and f._seen == {}


def test_a_reporter_that_comes_to_hold_the_replica_holds_a_waiting_drain() -> None:
    """A client that resumes (a new stream) while a drain waits for others."""
    async def main() -> None:
        clock = FakeClock()
        f = fence(clock, {"p1"})
        name(f, "p1", {"app/Model": "s1"}, replace=True)
        waiting = asyncio.create_task(f.wait(KEY, "r1", 30.0))
        await asyncio.sleep(0)
        f.stream_opened("xds#1")
        f.reported("xds#1", {KEY: "s1"}, replace=True, stream=True)
        name(f, "p1", {"app/Model": "s2"})  # p1 let go; xds#1 still holds r1
        for _ in range(5):
            await asyncio.sleep(0)
            clock.advance(0.1)
        assert not waiting.done()
        f.reported("xds#1", {KEY: "s2"}, stream=True)
        for _ in range(5):
            await asyncio.sleep(0)
            clock.advance(0.1)
        assert waiting.done() and await waiting == []

    asyncio.run(main())
