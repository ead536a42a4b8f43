"""The generic reconcile loop (controller/reconcile/loop.py) with toy reconcilers."""

from __future__ import annotations

import asyncio
import itertools

from fakes import FakeClock

from servefleet.controller.errors import NotLeader
from servefleet.controller.reconcile.loop import BACKOFF, ReconcileLoop


class Toy:
    """Reconciles keys "a", "b", "c"; "b" raises every time."""

    name = "toy"

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.passes = 0

    async def begin_pass(self, now: float) -> None:
        self.passes += 1

    def keys(self):
        return ["a", "b", "c"]

    def reconcile(self, key: str, now: float) -> None:
        if key == "b":
            raise RuntimeError("broken key")
        self.seen.append(key)

    def end_pass(self, now: float) -> None:
        pass


async def test_one_broken_key_does_not_stop_the_others() -> None:
    loop = ReconcileLoop(FakeClock())
    toy = Toy()
    loop.add(toy)
    await loop.run_pass()
    await loop.run_pass()
    assert toy.seen == ["a", "c", "a", "c"]


async def test_nothing_is_decided_once_leadership_is_gone() -> None:
    leading = True
    loop = ReconcileLoop(FakeClock(), leading=lambda: leading)
    toy = Toy()
    loop.add(toy)
    await loop.run_pass()
    leading = False
    await loop.run_pass()
    assert toy.passes == 1


async def test_failing_work_backs_off_and_a_success_ends_the_streak() -> None:
    clock = FakeClock()
    loop = ReconcileLoop(clock)
    attempts: list[float] = []

    async def flaky() -> None:
        attempts.append(clock.now)
        if len(attempts) < 4:
            raise RuntimeError("the runtime is down")

    start = clock.now
    for _ in range(200):  # 20 s in passes of 0.1 s; work offered on every one
        loop.spawn("w", flaky)
        await loop.wait_idle()
        clock.advance(0.1)
    delays = [round(b - a, 1) for a, b in itertools.pairwise(attempts)]
    assert delays[:3] == [BACKOFF.delay(1), BACKOFF.delay(2), BACKOFF.delay(3)]
    assert attempts[0] == start
    # After the success the key has no backoff: work runs on every pass again.
    assert len(attempts) > 100


async def test_one_task_per_key_replace_cancels_and_not_leader_ends_quietly() -> None:
    loop = ReconcileLoop(FakeClock())
    forever = asyncio.Event()
    assert loop.spawn("k", forever.wait)
    assert not loop.spawn("k", forever.wait)  # one at a time
    first = loop.task("k")
    assert loop.spawn("k", forever.wait, replace=True)
    await asyncio.sleep(0)
    assert first is not None and first.cancelled()

    async def deposed() -> None:
        raise NotLeader(None)

    assert loop.spawn("n", deposed)
    ended = loop.task("n")
    assert ended is not None
    await ended  # ends quietly: NotLeader is not a failure to retry
    assert loop.spawn("n", deposed)  # no backoff: the term is ending anyway
    await loop.cancel_all()
    assert not loop.busy("k")
