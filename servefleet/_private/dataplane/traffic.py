"""What a proxy saw of each deployment lately: request rate and latency.

`TrafficWindow.add` is called once per answered request (a dict hit and two
appends); `summary` is read with each load report (every 0.5 s) and gives,
per "application/deployment", the requests of the last WINDOW_S seconds,
how many of them failed, and the p50 and p99 of the latest MAX_SAMPLES of
their latencies. The controller
adds the proxies' figures up for GetStatus and the dashboard
(controller/load_reports.py). Pure, with an injectable clock.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

WINDOW_S = 5.0
BUCKET_S = 0.5
MAX_SAMPLES = 2048


class _Deployment:
    __slots__ = ("buckets", "latencies")

    def __init__(self) -> None:
        # [bucket start, requests, failed requests]
        self.buckets: deque[list[float]] = deque()
        self.latencies: deque[tuple[float, float]] = deque(maxlen=MAX_SAMPLES)


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class TrafficWindow:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_key: dict[str, _Deployment] = {}

    def add(self, key: str, seconds: float, failed: bool = False) -> None:
        now = self._clock()
        entry = self._by_key.get(key)
        if entry is None:
            entry = self._by_key[key] = _Deployment()
        buckets = entry.buckets
        if buckets and now - buckets[-1][0] < BUCKET_S:
            buckets[-1][1] += 1
            buckets[-1][2] += failed
        else:
            buckets.append([now, 1, int(failed)])
        entry.latencies.append((now, seconds))

    def summary(self) -> dict[str, tuple[int, float, float, float, int]]:
        """(requests, window seconds, p50 ms, p99 ms, failed requests) per key
        with requests in the window."""
        now = self._clock()
        out = {}
        for key, entry in list(self._by_key.items()):
            while entry.buckets and now - entry.buckets[0][0] > WINDOW_S:
                entry.buckets.popleft()
            while entry.latencies and now - entry.latencies[0][0] > WINDOW_S:
                entry.latencies.popleft()
            if not entry.buckets:
                del self._by_key[key]
                continue
            ordered = sorted(s for _, s in entry.latencies)
            requests = int(sum(b[1] for b in entry.buckets))
            out[key] = (requests, WINDOW_S, _percentile(ordered, 0.5) * 1e3,
                        _percentile(ordered, 0.99) * 1e3, int(sum(b[2] for b in entry.buckets)))
        return out
