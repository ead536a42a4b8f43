"""Metrics from user code, with the shape Ray Serve users know.

    from servefleet import metrics

    hits = metrics.Counter("cache_hits", "cache hits by model", tag_keys=("model",))
    hits.set_default_tags({"model": "default"})
    hits.inc(tags={"model": "small"})
    metrics.Gauge("queue_depth", tag_keys=("queue",)).set(3, tags={"queue": "a"})
    metrics.Histogram("batch_size", boundaries=[1, 2, 4, 8]).observe(3)

They appear on the replica's /metrics (Prometheus text format) with the
labels `application`, `deployment` and `replica` added, beside servefleet's
own. A tag key missing from `tags` and the defaults, or a tag not among the
tag keys, is a ValueError naming it. Keep tag values bounded (no request ids
or user input): every distinct value is a series Prometheus stores.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import prometheus_client

REPLICA_LABELS = ("application", "deployment", "replica")
_replica: dict[str, str] = dict.fromkeys(REPLICA_LABELS, "")


def bind_replica(application: str, deployment: str, replica: str) -> None:
    """Called by the replica process: the labels user metrics get."""
    _replica.update(application=application, deployment=deployment, replica=replica)


class _Metric:
    _kind: Any = None

    def __init__(self, name: str, description: str = "",
                 tag_keys: Iterable[str] | None = None, **options: Any) -> None:
        self._tag_keys = tuple(tag_keys or ())
        for key in self._tag_keys:
            if key in REPLICA_LABELS:
                raise ValueError(f"tag key {key!r} is added by servefleet; choose another")
        self._defaults: dict[str, str] = {}
        self._metric = self._kind(name, description or name, [*self._tag_keys, *REPLICA_LABELS],
                                  **options)

    def set_default_tags(self, default_tags: Mapping[str, str]) -> None:
        for key in default_tags:
            if key not in self._tag_keys:
                raise ValueError(f"default tag {key!r} is not one of the tag keys "
                                 f"{self._tag_keys}")
        self._defaults = dict(default_tags)

    def _child(self, tags: Mapping[str, str] | None) -> Any:
        values = {**self._defaults, **(tags or {})}
        for key in values:
            if key not in self._tag_keys:
                raise ValueError(f"tag {key!r} is not one of the tag keys {self._tag_keys}")
        missing = [k for k in self._tag_keys if k not in values]
        if missing:
            raise ValueError(f"missing tags {missing} (no value given and no default)")
        return self._metric.labels(*(str(values[k]) for k in self._tag_keys),
                                   *(_replica[k] for k in REPLICA_LABELS))


class Counter(_Metric):
    _kind = prometheus_client.Counter

    def inc(self, value: float = 1.0, tags: Mapping[str, str] | None = None) -> None:
        if value < 0:
            raise ValueError(f"a counter only goes up: inc({value})")
        self._child(tags).inc(value)


class Gauge(_Metric):
    _kind = prometheus_client.Gauge

    def set(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        self._child(tags).set(value)


class Histogram(_Metric):
    _kind = prometheus_client.Histogram

    def __init__(self, name: str, description: str = "",
                 boundaries: Sequence[float] | None = None,
                 tag_keys: Iterable[str] | None = None) -> None:
        options = {"buckets": list(boundaries)} if boundaries else {}
        super().__init__(name, description, tag_keys, **options)

    def observe(self, value: float, tags: Mapping[str, str] | None = None) -> None:
        self._child(tags).observe(value)


__all__ = ["Counter", "Gauge", "Histogram", "bind_replica"]
