"""Deadlines: asyncio.timeout's behaviour on one timer (servefleet/_private/deadlines.py)."""

from __future__ import annotations

import asyncio

import pytest

from servefleet._private.deadlines import Deadlines

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
    assert 0.1 <= took < 0.1 + TICK + 0.05  # scheduling slack on a loaded machine
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
