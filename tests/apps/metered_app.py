"""A deployment that keeps metrics of its own through servefleet.metrics."""

from __future__ import annotations

from servefleet import metrics

CALLS = metrics.Counter("metered_calls", "calls by size", tag_keys=("size",))
CALLS.set_default_tags({"size": "small"})
LAST = metrics.Gauge("metered_last_n", "the last n asked for")
SIZES = metrics.Histogram("metered_n", "n asked for", boundaries=[1, 10, 100])


def metered(request) -> str:
    n = int(request.query_params.get("n", "1"))
    CALLS.inc(tags={"size": "big"} if n > 10 else None)
    LAST.set(n)
    SIZES.observe(n)
    return f"n={n}"
