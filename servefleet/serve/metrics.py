"""Ray Serve's `ray.serve.metrics` under servefleet's import swap: the
metrics user code defines (servefleet.metrics), on each replica's /metrics."""

from servefleet.metrics import Counter, Gauge, Histogram

__all__ = ["Counter", "Gauge", "Histogram"]
