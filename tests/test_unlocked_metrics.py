"""The unlocked counters and histograms expose exactly what
prometheus_client's would for the same changes."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

import servefleet._private.observability.exposition  # noqa: F401  (no _created series, as in every process)
from servefleet._private.observability.unlocked_metrics import UnlockedCounter, UnlockedHistogram

BUCKETS = (0.001, 0.01, 0.1, 1.0, 10.0)
# Below, on and between the bounds, past the last: every bucket and +Inf.
OBSERVED = [0.0, 0.0005, 0.001, 0.0010001, 0.01, 0.05, 0.1, 0.7, 1.0, 9.99, 10.0, 11.0, 1e6]


def test_a_histogram_reads_as_prometheus_clients() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    locked = Histogram("t_seconds", "doc", ["a", "b"], buckets=BUCKETS, registry=theirs)
    unlocked = UnlockedHistogram("t_seconds", "doc", ["a", "b"], BUCKETS, registry=ours)
    for i, value in enumerate(OBSERVED):
        labels = ("x", "even" if i % 2 == 0 else "odd")
        locked.labels(*labels).observe(value)
        unlocked.labels(*labels).observe(value)
    assert generate_latest(ours) == generate_latest(theirs)
    assert b't_seconds_bucket{a="x",b="even",le="+Inf"} 7.0' in generate_latest(ours)


def test_a_counter_reads_as_prometheus_clients() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    locked = Counter("t_requests", "doc", ["outcome"], registry=theirs)
    unlocked = UnlockedCounter("t_requests", "doc", ["outcome"], registry=ours)
    for outcome, times in (("ok", 3), ("error", 1)):
        for _ in range(times):
            locked.labels(outcome).inc()
            unlocked.labels(outcome).inc()
    locked.labels("ok").inc(2.5)
    unlocked.labels("ok").inc(2.5)
    assert generate_latest(ours) == generate_latest(theirs)
    assert b't_requests_total{outcome="ok"} 5.5' in generate_latest(ours)


def test_the_wrong_number_of_labels_is_refused() -> None:
    counter = UnlockedCounter("t_wrong", "doc", ["a", "b"], registry=CollectorRegistry())
    with pytest.raises(ValueError, match=r"takes labels \('a', 'b'\)"):
        counter.labels("only one")
