"""Deadlines: asyncio.timeout's behaviour on one timer (servefleet/_private/edge/deadlines.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from random import Random
from typing import Any

import pytest

from servefleet._private.edge.deadlines import Deadlines

TICK = 0.02


async def test_a_block_past_its_limit_times_out_late_by_at_most_a_tick() -> None:
    deadlines = Deadlines(TICK)
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(TimeoutError):
        async with deadlines.bound(0.1) as bound:
            await asyncio.sleep(5)
    took = loop.time() - began
    assert bound.expired
    # Never early; how late is the fake-clock test's (a loaded machine's
    # scheduling adds its own delay here), but well before the 5 s sleep.
    assert 0.1 <= took < 1
    assert len(deadlines) == 0


async def test_blocks_that_end_in_time_leave_nothing_behind() -> None:
    deadlines = Deadlines(TICK)

    async def quick(n: int) -> int:
        async with deadlines.bound(0.5):
            await asyncio.sleep(0.001 * (n % 5))
        return n

    assert await asyncio.gather(*[quick(n) for n in range(200)]) == list(range(200))
    assert len(deadlines) == 0
    await asyncio.sleep(3 * TICK)
    assert deadlines._timer is None  # no timer ticks while nothing is bounded


async def test_each_task_runs_out_at_its_own_limit() -> None:
    deadlines = Deadlines(TICK)
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def bounded(limit: float, work: float) -> str:
        try:
            async with deadlines.bound(limit):
                await asyncio.sleep(work)
        except TimeoutError:
            return f"timed out at {loop.time() - began >= limit}"
        return "done"

    results = await asyncio.gather(bounded(0.05, 1), bounded(0.2, 0.1), bounded(0.3, 1),
                                   bounded(0.1, 0.01))
    assert list(results) == ["timed out at True", "done", "timed out at True", "done"]


async def test_a_lifted_limit_no_longer_applies() -> None:
    deadlines = Deadlines(TICK)
    async with deadlines.bound(0.05) as bound:
        bound.lift()
        await asyncio.sleep(0.2)
    assert not bound.expired


async def test_a_cancellation_from_outside_stays_a_cancellation() -> None:
    deadlines = Deadlines(TICK)
    entered = asyncio.Event()

    async def bounded() -> None:
        async with deadlines.bound(0.05):
            entered.set()
            try:
                await asyncio.sleep(5)
            finally:  # outside cancel and limit both land while it cleans up
                await asyncio.sleep(0.15)

    task = asyncio.create_task(bounded())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(deadlines) == 0


async def test_nested_limits_each_answer_for_their_own() -> None:
    deadlines = Deadlines(TICK)
    with pytest.raises(TimeoutError):  # the outer runs out: the inner lets it pass
        async with deadlines.bound(0.05) as outer:
            async with deadlines.bound(5) as inner:
                await asyncio.sleep(1)
    assert outer.expired and not inner.expired
    async with deadlines.bound(5) as outer:  # the inner runs out: the outer goes on
        with pytest.raises(TimeoutError):
            async with deadlines.bound(0.05):
                await asyncio.sleep(1)
        await asyncio.sleep(0.01)
    assert not outer.expired and len(deadlines) == 0


async def test_a_timeout_swallowed_inside_the_block_is_no_error() -> None:
    deadlines = Deadlines(TICK)
    async with deadlines.bound(0.05) as bound:
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(1)
    assert bound.expired
    assert asyncio.current_task().cancelling() == 0  # the cancellation was taken back


async def test_a_limit_already_past_runs_out_at_the_next_tick() -> None:
    deadlines = Deadlines(TICK)
    async with deadlines.bound(5):  # the timer runs, and has swept
        await asyncio.sleep(3 * TICK)
        for limit in (0, -1):
            with pytest.raises(TimeoutError):
                async with deadlines.bound(limit):
                    await asyncio.sleep(1)
    assert len(deadlines) == 0


class FakeLoop:
    """time() and call_at() of an event loop whose clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[tuple[float, Callable[..., Any], tuple]] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any) -> object:
        self.timers.append((when, callback, args))
        return object()

    def run_until(self, until: float) -> None:
        while due := sorted((t for t in self.timers if t[0] <= until), key=lambda t: t[0]):
            self.timers.remove(due[0])
            self.now = max(self.now, due[0][0])
            due[0][1](*due[0][2])
        self.now = until


class FakeTask:
    def __init__(self, loop: FakeLoop) -> None:
        self.loop = loop
        self.cancelled_at: float | None = None

    def cancel(self) -> None:
        self.cancelled_at = self.loop.now


def test_limits_run_out_at_the_first_tick_at_or_after_them() -> None:
    loop, random, tick = FakeLoop(), Random(7), 0.05
    deadlines = Deadlines(tick)
    limits = []
    for _ in range(500):
        loop.run_until(loop.now + random.uniform(0, 0.03))
        bound = deadlines.bound(0)
        bound._task = FakeTask(loop)  # type: ignore[assignment]
        when = loop.now + random.choice((0.0, random.uniform(0, 0.4)))
        deadlines._add(bound, when, loop)  # type: ignore[arg-type]
        limits.append((when, bound))
    loop.run_until(loop.now + 1)
    late = [bound._task.cancelled_at - when for when, bound in limits]  # type: ignore[union-attr]
    assert all(0 <= t < tick for t in late), (min(late), max(late))
    assert len(deadlines) == 0 and not loop.timers  # nothing armed once all ran out


def test_a_deadlines_outliving_its_event_loop_works_on_the_next() -> None:
    deadlines = Deadlines(TICK)

    async def quick() -> None:
        async with deadlines.bound(5):
            pass

    async def slow() -> bool:
        try:
            async with deadlines.bound(0.05):
                await asyncio.sleep(1)
        except TimeoutError:
            return True
        return False

    asyncio.run(quick())  # its loop closes with the sweep timer set
    assert asyncio.run(slow())
