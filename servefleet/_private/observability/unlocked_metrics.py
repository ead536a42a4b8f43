"""Counters and histograms for one event loop: plain numbers, no lock.

prometheus_client's Counter and Histogram take a lock on every change (a
histogram two: its bucket and its sum), which cost a replica about a tenth
of its CPU per request on a no-op handler (bench/data_plane.py). A series
changed only from one thread (the event loop, where a replica answers HTTP,
gRPC and WebSockets) needs none: these keep plain numbers and are read by
the registry's collection, from any thread. The exposition is the same as
prometheus_client's (`_total` counters, cumulative `le` buckets ending at
+Inf, `_sum` and `_count`).

Only for series changed from a single thread: from several, increments
could be lost.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString


class CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class HistogramChild:
    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket (not cumulative); the last: +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # The first bucket whose upper bound is >= value (Prometheus's `le`).
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value


class _Family(Collector):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry = REGISTRY) -> None:
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], object] = {}
        registry.register(self)

    def _child(self, values: tuple[str, ...], make: type, *args: object) -> object:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, given {values}")
        found = self._children.get(values)
        if found is None:
            found = self._children[values] = make(*args)
        return found

    def _items(self) -> list[tuple[tuple[str, ...], object]]:
        return list(self._children.items())  # a copy: children may be added meanwhile


class UnlockedCounter(_Family):
    """A counter family (`name` without `_total`, as prometheus_client's)."""

    def labels(self, *values: str) -> CounterChild:
        child = self._child(tuple(values), CounterChild)
        assert isinstance(child, CounterChild)
        return child

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._items():
            assert isinstance(child, CounterChild)
            family.add_metric(values, child.value)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)


class UnlockedHistogram(_Family):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 buckets: Sequence[float], registry: CollectorRegistry = REGISTRY) -> None:
        bounds = tuple(sorted(float(b) for b in buckets if b != float("inf")))
        if not bounds:
            raise ValueError(f"{name}: no finite bucket bounds")
        self.bounds = bounds
        super().__init__(name, documentation, labelnames, registry)

    def labels(self, *values: str) -> HistogramChild:
        child = self._child(tuple(values), HistogramChild, self.bounds)
        assert isinstance(child, HistogramChild)
        return child

    def collect(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, child in self._items():
            assert isinstance(child, HistogramChild)
            counts, total = list(child.counts), child.sum  # one moment's numbers
            cumulative, buckets = 0, []
            for bound, count in zip((*self.bounds, float("inf")), counts, strict=True):
                cumulative += count
                buckets.append((floatToGoString(bound), float(cumulative)))
            family.add_metric(values, buckets, total)
        yield family

    def describe(self) -> Iterator[Metric]:
        yield HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
