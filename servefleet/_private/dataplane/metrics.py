"""Data-plane metrics shared by proxies and handles (the process's /metrics).

- servefleet_retries_total{application, deployment, reason}: requests sent
  to another replica because one did not take them; reason is `refused` (no
  connection), `closed` (a kept-alive connection closed before any answer),
  or the replica's refusal: `overloaded`, `loading`, `draining` (`rejected`
  for any other value); `hung`: a GET or HEAD its replica held without
  answering while others answered (forward.py).
- servefleet_ejections_total{application, deployment}: replicas this
  process stopped sending new requests to because they held requests and
  answered none while others answered (passive health, balancer.py).
- servefleet_queued_requests{application, deployment}: requests waiting for
  a replica with room, now.
- servefleet_sent_requests{application, deployment}: requests handed to a
  replica and not yet answered, now.

The gauges are read from the pools when scraped, not kept per request
(with `--workers`, copied every 0.5 s: publish_pools).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import REGISTRY, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .balancer import ReplicaPool

RETRIES = Counter("servefleet_retries", "requests sent again to another replica",
                  ["application", "deployment", "reason"])
REJECTION_REASONS = frozenset({"overloaded", "loading", "draining"})


EJECTIONS = Counter("servefleet_ejections", "replicas set aside for answering nothing "
                    "while others answered (passive health)", ["application", "deployment"])


def retry_reason(refused: bool, message: str) -> str:
    if refused:
        return "refused"
    if message.startswith("kept-alive connection closed"):
        return "closed"
    return message if message in REJECTION_REASONS else "rejected"


class Pools(Protocol):
    """What the gauges read of a process's pools (replica_sets.ReplicaSets,
    which counts its retries here: a protocol, not an import)."""

    @property
    def pools(self) -> Mapping[tuple[str, str], ReplicaPool]: ...


class _Pools(Collector):
    """Queued and in-flight requests of every live ReplicaSets in the process."""

    def __init__(self) -> None:
        self._sets: weakref.WeakSet[Pools] = weakref.WeakSet()

    def add(self, sets: Pools) -> None:
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


    def publish(self, gauges: tuple[Gauge, Gauge], shown: set[tuple[str, str]]) -> None:
        """Copy the pools into multiprocess gauges (zero the ones gone since)."""
        queued, sent = gauges
        now: set[tuple[str, str]] = set()
        for sets in list(self._sets):
            for key, pool in list(sets.pools.items()):
                queued.labels(*key).set(pool.queued)
                sent.labels(*key).set(pool.ongoing)
                now.add(key)
        for key in shown - now:
            queued.labels(*key).set(0)
            sent.labels(*key).set(0)
        shown.clear()
        shown.update(now)


POOLS = _Pools()
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    REGISTRY.register(POOLS)


async def publish_pools(interval_s: float = 0.5) -> None:
    """For a proxy among `--workers` (its metrics are summed across processes
    through prometheus_client's multiprocess files, which a collector called
    at scrape time cannot join): the same two gauges, copied every interval."""
    gauges = (
        Gauge("servefleet_queued_requests", "requests waiting for a replica with room",
              ["application", "deployment"], multiprocess_mode="livesum"),
        Gauge("servefleet_sent_requests", "requests handed to a replica and not yet answered",
              ["application", "deployment"], multiprocess_mode="livesum"))
    shown: set[tuple[str, str]] = set()
    while True:
        POOLS.publish(gauges, shown)
        await asyncio.sleep(interval_s)
