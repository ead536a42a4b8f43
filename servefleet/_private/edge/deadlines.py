"""Time limits on many tasks at once, on one timer.

`asyncio.timeout` makes a timer handle for each use and cancels it after;
the event loop keeps cancelled handles in its heap until it rebuilds it. A
proxy bounds every request it forwards (the wait for the answer's start, 60 s
by default), nearly all of which answer in milliseconds, so that is a timer
made and dropped per request: about 6% of the proxy's CPU in a profile.
The proxy uses Deadlines for that default bound only: a limit the user set
(a request timeout, a gRPC caller's deadline, which the proxy meets 50 ms
early so that its status arrives first) stays an exact `asyncio.timeout`.

`Deadlines` files each bounded task in a bucket of TICK_S by when its limit
falls (a dict entry, removed when the task leaves the bound) and one timer
per Deadlines sweeps the buckets that came due, every TICK_S while any task
is bounded. A limit runs out at the first tick at or after it: less than
TICK_S late (plus the event loop's own delays), never early.

`Deadlines.bound(seconds)` is used as `asyncio.timeout(seconds)` is: the task
is cancelled when the time runs out, and the bound turns that cancellation
into TimeoutError as the block ends (unless the task was also cancelled from
elsewhere: that CancelledError goes on). `lift()` takes the limit away (an
answer that began is not cut short by the wait for its start); after the
limit ran out it does nothing (asyncio's reschedule raises there).
"""

from __future__ import annotations

import asyncio
from types import TracebackType

TICK_S = 0.05


class Deadlines:
    """The bounds of tasks on one event loop at a time."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self.tick_s = tick_s
        self._buckets: dict[int, dict[Bound, None]] = {}
        self._swept = 0  # the last bucket swept
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def bound(self, seconds: float) -> Bound:
        """A limit of `seconds` on the block it is entered for (`async with`)."""
        return Bound(self, seconds)

    def __len__(self) -> int:
        return sum(len(bucket) for bucket in self._buckets.values())

    def _add(self, bound: Bound, when: float, loop: asyncio.AbstractEventLoop) -> None:
        # Armed again on another loop: one that closed with the timer set never runs it.
        if self._timer is None or loop is not self._loop:
            self._loop, self._swept = loop, int(loop.time() // self.tick_s)
            self._arm(loop)
        # The first tick at or after `when`, and one not swept yet (a limit
        # already past, of 0 s or less, runs out at the next).
        key = max(-int(-when // self.tick_s), self._swept + 1)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = {}
        bucket[bound] = None
        bound._key = key

    def _remove(self, bound: Bound) -> None:
        key, bound._key = bound._key, None
        if key is not None:
            bucket = self._buckets[key]
            del bucket[bound]
            if not bucket:
                del self._buckets[key]

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        # At the next tick's own time (not a tick after this sweep, which
        # drifts): a bucket is swept as its time comes.
        key = self._swept + 1
        self._timer = loop.call_at(key * self.tick_s, self._sweep, loop, key)

    def _sweep(self, loop: asyncio.AbstractEventLoop, key: int) -> None:
        # The timer's own key counts as come (the clock, read in floats, can
        # say a hair before it: as early as asyncio.timeout's timers can be).
        now = max(key, int(loop.time() // self.tick_s))
        # Bucket by bucket: a loop held up for long has few keys to go through.
        due = [self._buckets.pop(k) for k in range(self._swept + 1, now + 1)
               if k in self._buckets]
        self._swept = now
        self._timer = None
        if self._buckets:
            self._arm(loop)  # first: the next sweep is set whatever expiring does
        for bucket in due:
            for bound in bucket:
                bound._key = None
                bound._expire()


class Bound:
    """One task's limit (see Deadlines.bound)."""

    __slots__ = ("_cancelling", "_deadlines", "_key", "_seconds", "_task", "expired")

    def __init__(self, deadlines: Deadlines, seconds: float) -> None:
        self._deadlines, self._seconds = deadlines, seconds
        self._key: int | None = None
        self._task: asyncio.Task | None = None
        self._cancelling = 0
        self.expired = False

    async def __aenter__(self) -> Bound:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a Deadlines bound is for use in a task")
        self._task, self._cancelling = task, task.cancelling()
        loop = task.get_loop()
        self._deadlines._add(self, loop.time() + self._seconds, loop)
        return self

    def lift(self) -> None:
        """No limit any more for the rest of the block."""
        self._deadlines._remove(self)

    def _expire(self) -> None:
        assert self._task is not None
        self.expired = True
        self._task.cancel()

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self._deadlines._remove(self)
        if self.expired:
            assert self._task is not None
            # Ours was the only cancellation left: it becomes the timeout.
            if self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
                raise TimeoutError from error
