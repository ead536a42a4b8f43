"""The drain fence: a replica drains once no reporter routes by a set that holds it."""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeClock

from servefleet.controller.drain_fence import HISTORY, MAX_WAIT_S, STALE_S, DrainFence
from servefleet.controller.errors import InvalidArgument

KEY = ("app", "Model")


def fence(clock: FakeClock, watching: set[str]) -> DrainFence:
    made = DrainFence(clock, lambda: watching)
    made.published(KEY, "s1", ["r1", "r2"])
    made.published(KEY, "s2", ["r2"])  # r1 left the set
    return made


def test_a_replica_is_held_while_a_watching_reporter_routes_by_a_set_with_it() -> None:
    clock = FakeClock()
    f = fence(clock, {"p1", "p2", "p3"})
    f.reported("p1", f.check({"app/Model": "s1"}))
    f.reported("p2", f.check({"app/Model": "s2"}))
    f.reported("p3", f.check({"app/Other": "x"}))  # routes nowhere in app/Model
    assert f.holding(KEY, "r1") == ["p1"]
    assert f.holding(KEY, "r2") == ["p1", "p2"]
    f.reported("p1", f.check({"app/Model": "s2"}))
    assert f.holding(KEY, "r1") == []


def test_a_set_this_leader_did_not_publish_may_hold_the_replica() -> None:
    f = fence(FakeClock(), {"p1"})
    f.reported("p1", f.check({"app/Model": "from-the-last-term"}))
    assert f.holding(KEY, "r1") == ["p1"]
    f.removed(KEY)  # the deployment is gone: no set is known
    assert f.holding(KEY, "r2") == ["p1"]
    f.reported("p1", f.check({}))  # it dropped the deployment too
    assert f.holding(KEY, "r2") == []


def test_only_reporters_with_a_watch_stream_count_and_the_gone_are_forgotten() -> None:
    clock = FakeClock()
    watching = {"p1", "p2"}
    f = fence(clock, watching)
    for reporter in ("p1", "p2"):
        f.reported(reporter, f.check({"app/Model": "s1"}))
    assert f.holding(KEY, "r1") == ["p1", "p2"]
    watching.discard("p2")  # killed: it hears of no change, waiting for it is no use
    assert f.holding(KEY, "r1") == ["p1"]
    watching.add("p2")  # its stream came back before STALE_S: what it named counts again
    assert f.holding(KEY, "r1") == ["p1", "p2"]
    watching.discard("p2")
    clock.advance(STALE_S)
    assert f.holding(KEY, "r1") == ["p1"]  # a silent reporter that still watches counts
    watching.add("p2")
    assert f.holding(KEY, "r1") == ["p1"]  # p2 was forgotten: it names its set anew


def test_a_report_without_applied_keeps_what_the_reporter_named() -> None:
    clock = FakeClock()
    watching: set[str] = set()
    f = fence(clock, watching)
    f.reported("p1", f.check({"app/Model": "s1"}))
    clock.advance(STALE_S - 1)
    f.reported("p1", None)  # a load report that left it out: unchanged, and fresh
    clock.advance(2)
    watching.add("p1")
    assert f.holding(KEY, "r1") == ["p1"]
    f.reported("p9", None)  # a reporter that never named a set is not waited for
    watching.add("p9")
    assert f.holding(KEY, "r1") == ["p1"]


def test_old_sets_are_forgotten_past_the_history() -> None:
    f = fence(FakeClock(), {"p1"})
    f.reported("p1", f.check({"app/Model": "s1"}))
    for i in range(HISTORY):
        f.published(KEY, f"later-{i}", ["r2"])
    assert f.holding(KEY, "r2") == ["p1"]  # s1 unknown now: it may hold anything


def test_bad_applied_sets_are_refused_naming_the_entry() -> None:
    f = DrainFence(FakeClock())
    for bad, named in (({"no-slash": "s"}, "applied.snapshot_ids['no-slash']"),
                       ({"app/Model": ""}, "applied.snapshot_ids['app/Model']"),
                       ({"app/Model": "x" * 65}, "snapshot id"),
                       ({"app/bad name": "s"}, "applied.snapshot_ids['app/bad name']")):
        with pytest.raises(InvalidArgument, match=named.replace("[", r"\[")):
            f.check(bad)


def test_wait_ends_when_the_last_reporter_lets_go_or_at_its_bound() -> None:
    async def main() -> None:
        clock = FakeClock()
        f = fence(clock, {"p1"})
        f.reported("p1", f.check({"app/Model": "s1"}))
        waiting = asyncio.create_task(f.wait(KEY, "r1", 30.0))
        for _ in range(5):
            await asyncio.sleep(0)
            clock.advance(0.5)
        assert not waiting.done()
        f.reported("p1", f.check({"app/Model": "s2"}))
        assert await waiting == []

        started = clock.monotonic()
        f.reported("p1", f.check({"app/Model": "s1"}))
        bounded = asyncio.create_task(f.wait(KEY, "r1", 30.0))
        while not bounded.done():
            await asyncio.sleep(0)
            clock.advance(0.25)
        assert await bounded == ["p1"]
        assert MAX_WAIT_S <= clock.monotonic() - started <= MAX_WAIT_S + 0.5
        short = asyncio.create_task(f.wait(KEY, "r1", 1.0))  # the replica's own, shorter
        started = clock.monotonic()
        while not short.done():
            await asyncio.sleep(0)
            clock.advance(0.25)
        assert await short == ["p1"] and clock.monotonic() - started <= 1.5

    asyncio.run(main())
