"""When each RUNNING replica's next health check is due.

The first check of a replica falls at a random point within one period and
each later one a period on, jittered by +-10%, so replicas that started
together (after a deploy or a failover) are not all checked in one pass.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable


class HealthSchedule:
    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._next: dict[str, float] = {}

    def due(self, replica_id: str, now: float, period_s: float) -> bool:
        """Whether a check of `replica_id` is due now; if so, the next is booked."""
        if now < self._next.setdefault(replica_id, now + period_s * self._rng.random()):
            return False
        self._next[replica_id] = now + period_s * self._rng.uniform(0.9, 1.1)
        return True

    def next_of(self, replica_ids: Iterable[str]) -> float:
        """When the first of the next checks of these replicas is booked
        (math.inf: none is)."""
        return min((self._next[i] for i in replica_ids if i in self._next), default=math.inf)

    def forget(self, replica_id: str) -> None:
        self._next.pop(replica_id, None)
