"""Data-plane metrics shared by proxies and handles (the process's /metrics).

- servefleet_retries_total{application, deployment, reason}: requests sent
  to another replica because one did not take them; reason is `refused` (no
  connection), `closed` (a kept-alive connection closed before any answer),
  or the replica's refusal: `overloaded`, `loading`, `draining` (`rejected`
  for any other value).
- servefleet_queued_requests{application, deployment}: requests waiting for
  a replica with room, now.
- servefleet_sent_requests{application, deployment}: requests handed to a
  replica and not yet answered, now.

The gauges are read from the pools when scraped, not kept per request.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .replica_sets import ReplicaSets

RETRIES = Counter("servefleet_retries", "requests sent again to another replica",
                  ["application", "deployment", "reason"])
REJECTION_REASONS = frozenset({"overloaded", "loading", "draining"})


def retry_reason(refused: bool, message: str) -> str:
    if refused:
        return "refused"
    if message.startswith("kept-alive connection closed"):
        return "closed"
    return message if message in REJECTION_REASONS else "rejected"


class _Pools(Collector):
    """Queued and in-flight requests of every live ReplicaSets in the process."""

    def __init__(self) -> None:
        self._sets: weakref.WeakSet[ReplicaSets] = weakref.WeakSet()

    def add(self, sets: ReplicaSets) -> None:
        self._sets.add(sets)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        queued = GaugeMetricFamily("servefleet_queued_requests",
                                   "requests waiting for a replica with room",
                                   labels=["application", "deployment"])
        sent = GaugeMetricFamily("servefleet_sent_requests",
                                 "requests handed to a replica and not yet answered",
                                 labels=["application", "deployment"])
        for sets in list(self._sets):
            for (app, name), pool in list(sets.pools.items()):
                queued.add_metric([app, name], pool.queued)
                sent.add_metric([app, name], pool.ongoing)
        yield queued
        yield sent


POOLS = _Pools()
REGISTRY.register(POOLS)
