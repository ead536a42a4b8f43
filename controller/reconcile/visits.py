"""Which deployments a reconcile pass visits: what changed, what is due, what is unsettled.

After controller-runtime's work queue with requeue-after: a pass does not
visit every deployment. It visits

- the deployments *marked* since the last pass (their goal changed, or an
  observation of one of their replicas came in: a start, a probe, a health
  check, a stop, an exit the runtime listing found);
- the *restless* ones: those whose last visit left them unsettled (a replica
  starting, recovering, stopping or failed; a start to retry; anything the
  plan still has to do). They are visited every pass, as before;
- the settled ones whose timer is due: the next health check of one of their
  replicas (the reconciler says when after each visit);
- and, every FULL_PASS_S, every deployment: a safety net for a change that
  was not marked. It costs what every pass cost before, once a period.

At 1,000 settled deployments a pass that visited all of them took 22 ms of
CPU (bench/scale_pass.py, 1,000 deployments of one replica); the reconciler's
state is the same whether a settled deployment is visited or not, so skipping
it changes no decision, only when a timer-driven one is made.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

# Every deployment is visited at least this often, changed or not.
FULL_PASS_S = 5.0

K = TypeVar("K", bound=Hashable)


class Visits(Generic[K]):
    def __init__(self, full_pass_s: float = FULL_PASS_S) -> None:
        self._full_pass_s = full_pass_s
        self._marked: set[K] = set()
        self._restless: set[K] = set()
        # (time, key) of settled deployments' next visit; an entry whose time is
        # no longer the key's own (`_at`) is stale and skipped.
        self._timers: list[tuple[float, K]] = []
        self._at: dict[K, float] = {}
        self._next_full = -math.inf  # the first pass visits everything
        self.full = False  # whether the pass last planned is a full one

    def mark(self, key: K) -> None:
        """Visit `key` on the next pass."""
        self._marked.add(key)

    def full_due(self, now: float) -> bool:
        """Whether the pass at `now` will be a full one."""
        return now >= self._next_full

    def force_full(self) -> None:
        """Make the next pass a full one (a new term, tests)."""
        self._next_full = -math.inf

    def due(self, now: float, every: Callable[[], Iterable[K]]) -> list[K]:
        """The keys to visit in the pass at `now`, sorted; `every()` gives all
        known keys, asked only for a full pass. Marks are taken."""
        if now >= self._next_full:
            self._next_full = now + self._full_pass_s
            self.full = True
            keys = set(every()) | self._marked | self._restless
        else:
            self.full = False
            keys = self._marked | self._restless
        while self._timers and self._timers[0][0] <= now:
            at, key = heapq.heappop(self._timers)
            if self._at.get(key) == at:
                del self._at[key]
                keys.add(key)
        self._marked = set()
        return sorted(keys)  # type: ignore[type-var]  # keys are tuples of str

    def visited(self, key: K, settled_until: float | None) -> None:
        """After visiting `key`: None if it is unsettled (visited every pass),
        else the time of its next timer (math.inf: none, visit when marked)."""
        if settled_until is None:
            self._restless.add(key)
            self._at.pop(key, None)
            return
        self._restless.discard(key)
        if math.isinf(settled_until):
            self._at.pop(key, None)
        elif self._at.get(key) != settled_until:
            self._at[key] = settled_until
            heapq.heappush(self._timers, (settled_until, key))

    def forget(self, key: K) -> None:
        """`key` is gone: no timer, not restless (a mark still visits it)."""
        self._restless.discard(key)
        self._at.pop(key, None)

    def restless(self) -> int:
        """How many keys are visited every pass (tests, metrics)."""
        return len(self._restless)
