"""Choosing a replica: power of two choices over in-flight counts, with a queue.

Each deployment has a `ReplicaPool`. `acquire()` picks two replicas at random
among those below their `max_ongoing_requests` and takes the less loaded
(Mitzenmacher's power of two choices, as Ray Serve's router does). When every
replica is full, or there is none yet, the request waits in a FIFO queue;
past `max_queued_requests` waiting (-1: no limit) it is refused with
`Overloaded`. A replica that failed a connection is set aside until the next
replica-set snapshot names it again.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass, field


class Overloaded(Exception):
    """Every replica is busy and the queue is full."""


@dataclass
class Replica:
    replica_id: str
    address: str
    in_flight: int = 0


@dataclass
class ReplicaPool:
    max_ongoing: int = 5
    max_queued: int = -1
    replicas: dict[str, Replica] = field(default_factory=dict)
    _down: set[str] = field(default_factory=set)
    _waiters: deque[asyncio.Future[None]] = field(default_factory=deque)

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def update(self, endpoints: list[tuple[str, str]], max_ongoing: int,
               max_queued: int) -> None:
        """Apply a replica-set snapshot: the controller's word replaces local guesses."""
        current = dict(self.replicas)
        self.replicas = {rid: current.get(rid) or Replica(rid, addr) for rid, addr in endpoints}
        for rid, addr in endpoints:
            self.replicas[rid].address = addr
        self._down.clear()
        self.max_ongoing, self.max_queued = max(1, max_ongoing), max_queued
        self._wake()

    def mark_down(self, replica: Replica) -> None:
        self._down.add(replica.replica_id)

    def _candidates(self, exclude: set[str]) -> list[Replica]:
        return [r for r in self.replicas.values()
                if r.in_flight < self.max_ongoing and r.replica_id not in self._down
                and r.replica_id not in exclude]

    def _pick(self, exclude: set[str]) -> Replica | None:
        candidates = self._candidates(exclude)
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        a, b = random.sample(candidates, 2)
        return a if a.in_flight <= b.in_flight else b

    async def acquire(self, exclude: set[str] | None = None) -> Replica:
        """A replica with room for one more request; waits in the queue if none."""
        exclude = exclude or set()
        while True:
            replica = self._pick(exclude)
            if replica is not None:
                replica.in_flight += 1
                return replica
            if 0 <= self.max_queued <= len(self._waiters):
                raise Overloaded(f"{len(self._waiters)} requests already queued")
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
            exclude = set()  # the pool changed: everything is worth another look

    def release(self, replica: Replica) -> None:
        replica.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        """Wake as many queued requests as there are free slots, oldest first."""
        free = sum(self.max_ongoing - r.in_flight for r in self._candidates(set()))
        while self._waiters and free > 0:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1
