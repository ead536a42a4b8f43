"""The one reconcile loop: passes over every reconciler's keys, and the work they start.

After controller-runtime's controller: reconcilers decide, the loop owns
everything around the decisions, so no reconciler writes a retry loop of its
own.

- A pass calls, for each reconciler, `begin_pass`, then `reconcile(key)` for
  each of its `keys()`, then `end_pass`. A key whose step raises is logged
  and tried again on the next pass; the other keys and reconcilers go on.
  Passes run every `period_s`, or sooner after `wake()` (a new goal, a
  finished piece of work).
- `reconcile` must be quick and must not await: it decides and hands I/O to
  `spawn(work_key, work)`, which runs `work()` as that key's one background
  task. Work that raises is retried on a later pass after BACKOFF (doubling
  while it keeps failing, one traceback per streak); work that raises
  NotLeader ends quietly, as the term is ending.
- `leading()` is checked before every pass: once it is false nothing more is
  decided or started.

BACKOFF is the controller's one retry policy: the loop's work, failed replica
starts (planner.py) and the loading of a new term (term.py) all use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import Callable, Coroutine, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..clock import Clock
from ..errors import NotLeader, Unavailable
from ..metrics import RECONCILE

logger = logging.getLogger(__name__)

Work = Callable[[], Coroutine[Any, Any, object]]  # its result is not used
# Passes that follow a wake() are at least this far apart, so a burst of
# finished work is taken in one pass rather than in one pass each.
MIN_GAP_S = 0.01


# The collector's first-generation threshold in a controller process (CPython's
# default is 700). A pass over 1,000 deployments allocates in bursts while
# ~100 health checks are in flight; at 700 those in-flight objects are
# promoted until a full collection runs, which at 10,000 replicas stalls a
# pass for ~70 ms (about one pass in 75). At 5,000 they die young.
GC_THRESHOLD0 = 5_000


def tune_gc() -> None:
    """Set the collector up for a long-running controller (see GC_THRESHOLD0)."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD0, gen1, gen2)


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts: `base_s`, doubling, at most `max_s`."""

    base_s: float = 0.5
    max_s: float = 10.0

    def delay(self, attempt: int) -> float:
        """The wait after the `attempt`-th failure in a row (1 for the first)."""
        return min(self.max_s, self.base_s * 2 ** max(0, attempt - 1))


BACKOFF = Backoff()


K = TypeVar("K", bound=Hashable)


class Reconciler(Protocol[K]):
    """One kind of convergence run by the loop (replicas, application builds)."""

    name: str

    async def begin_pass(self, now: float) -> None:
        """I/O that precedes the pass's decisions (e.g. one runtime listing)."""

    def keys(self) -> Iterable[K]:
        """The keys to reconcile in this pass: desired and observed ones."""

    def reconcile(self, key: K, now: float) -> None:
        """Decide for `key` and spawn its I/O; no awaiting."""

    def end_pass(self, now: float) -> None:
        """Publish what the pass observed and decided."""


class ReconcileLoop:
    def __init__(self, clock: Clock | None = None, *, period_s: float = 0.1,
                 leading: Callable[[], bool] = lambda: True,
                 backoff: Backoff = BACKOFF) -> None:
        self._clock = clock or Clock()
        self._period_s = period_s
        self._leading = leading
        self._backoff = backoff
        self._reconcilers: list[Reconciler[Any]] = []
        self._tasks: dict[Hashable, asyncio.Task[None]] = {}
        # Per work key: failures in a row, and the time before which it is not retried.
        self._failed: dict[Hashable, int] = {}
        self._retry_at: dict[Hashable, float] = {}
        self._woken = asyncio.Event()

    def add(self, reconciler: Reconciler[Any]) -> None:
        self._reconcilers.append(reconciler)

    # -- passes -------------------------------------------------------------------

    async def run(self) -> None:
        """Pass after pass until cancelled; the work under way is cancelled with it."""
        try:
            while True:
                await self.run_pass()
                self._woken.clear()
                await self._clock.sleep(MIN_GAP_S)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._period_s - MIN_GAP_S):
                        await self._woken.wait()
        finally:
            await self.cancel_all()

    def wake(self) -> None:
        """Run the next pass now rather than at the end of the period."""
        self._woken.set()

    async def run_pass(self) -> None:
        for reconciler in self._reconcilers:
            if not self._leading():
                return  # the term is ending: decide and start nothing more
            began = time.perf_counter()
            now = self._clock.monotonic()
            try:
                await reconciler.begin_pass(now)
            except (NotLeader, asyncio.CancelledError):
                raise
            except Exception:
                logger.exception("%s: the start of a pass failed", reconciler.name)
            for key in list(reconciler.keys()):
                try:
                    reconciler.reconcile(key, now)
                except Exception:
                    logger.exception("%s: reconciling %s failed; retrying next pass",
                                     reconciler.name, key)
            try:
                reconciler.end_pass(now)
            except Exception:
                logger.exception("%s: the end of a pass failed", reconciler.name)
            RECONCILE.labels(reconciler.name).observe(time.perf_counter() - began)

    # -- work -----------------------------------------------------------------------

    def busy(self, key: Hashable) -> bool:
        task = self._tasks.get(key)
        return task is not None and not task.done()

    def task(self, key: Hashable) -> asyncio.Task[None] | None:
        return self._tasks.get(key)

    def spawn(self, key: Hashable, work: Work, *, replace: bool = False) -> bool:
        """Run `work()` as `key`'s one task; False if one runs (and not `replace`)
        or the key is backing off after failures. `work` is called inside the
        task, so a task cancelled before it ran leaves no coroutine behind."""
        if self._clock.monotonic() < self._retry_at.get(key, 0.0):
            return False
        previous = self._tasks.get(key)
        if previous is not None and not previous.done():
            if not replace:
                return False
            previous.cancel()
        task = asyncio.create_task(self._guarded(key, work), name=f"work-{key}")
        self._tasks[key] = task
        task.add_done_callback(
            lambda t: self._tasks.pop(key, None) if self._tasks.get(key) is t else None)
        return True

    async def _guarded(self, key: Hashable, work: Work) -> None:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except NotLeader:
            logger.warning("%s: leadership lost; stopping this work", key)
        except Exception as e:
            self._back_off(key, e)
        else:
            self.forget(key)
        self.wake()

    def _back_off(self, key: Hashable, error: Exception) -> None:
        count = self._failed.get(key, 0) + 1
        self._failed[key] = count
        delay = self._backoff.delay(count)
        self._retry_at[key] = self._clock.monotonic() + delay
        if count == 1 and not isinstance(error, Unavailable):
            logger.exception("%s: work failed; retrying in %.1fs", key, delay)
        else:
            logger.warning("%s: %s (failed %d times in a row); retrying in %.1fs", key,
                           error, count, delay)

    def forget(self, key: Hashable) -> None:
        """Drop `key`'s failure streak (it succeeded, or it is gone)."""
        self._failed.pop(key, None)
        self._retry_at.pop(key, None)

    def cancel(self, key: Hashable) -> None:
        task = self._tasks.get(key)
        if task is not None:
            task.cancel()

    async def cancel_all(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def wait_idle(self) -> None:
        """Wait for the work under way now (tests and benchmarks)."""
        await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)
