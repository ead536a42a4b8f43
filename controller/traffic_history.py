"""Fifteen minutes of each deployment's traffic, and the latest failed requests (soft state).

Every INTERVAL_S (5 s) the term takes one point per live deployment
(`sample`): requests/s, failed requests/s, p50 and p99 in ms, as GetStatus
sums them over the proxies' fresh reports (load_reports.py; p50 and p99
are None when no requests were reported), and the count of RUNNING
replicas. A deployment keeps the points of the last SPAN_S (900 s, at
most POINTS = 180 of them); one not live at a sample loses its series, so
memory is bounded by the live deployments (~20 KB each).

Failed requests come from the proxies' reports (`add_errors`, after
LoadReports checked them): the latest MAX_ERRORS across proxies, newest
first by arrival (each keeps the time its proxy gave it; ordering by those
would let one proxy with a fast clock pin its errors to the top), one per
request id: a request id seen again (a client retrying with the same
x-request-id, two proxies answering for one request) moves to the front
with its latest failure.

Kept per leader term, like LoadReports: a new leader starts empty. The
reconcile loop takes the samples (`HistorySampler`, one cheap step at the
end of a pass when a point is due), so sampling starts and stops with the
term's loop. The dashboard reads it through GET /api/history
(api/dashboard.py). Pure, with an injected clock.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple, Protocol

from servefleet.v1 import controller_pb2 as api

from .clock import Clock

INTERVAL_S = 5.0
SPAN_S = 900.0
POINTS = int(SPAN_S / INTERVAL_S)
MAX_ERRORS = 50
Key = tuple[str, str]


class Figures(Protocol):
    """What LoadReports.traffic gives for a deployment (its Traffic)."""

    @property
    def requests_per_s(self) -> float: ...
    @property
    def errors_per_s(self) -> float: ...
    @property
    def p50_ms(self) -> float: ...
    @property
    def p99_ms(self) -> float: ...


class Point(NamedTuple):
    time: float  # wall clock (Unix seconds): the browser draws against it
    requests_per_s: float
    errors_per_s: float
    p50_ms: float | None  # None: no requests reported
    p99_ms: float | None
    running: int


class Failure(NamedTuple):
    """One failed request, copied out of its report (a message kept from a
    report would keep the whole report alive)."""

    time_unix_s: float
    application: str
    deployment: str
    route: str
    http_status: int
    grpc_code: str
    request_id: str
    trace_id: str


class TrafficHistory:
    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or Clock()
        self._series: dict[Key, deque[Point]] = {}
        self._sampled_at: float | None = None  # monotonic
        # request id (or a number for a failure without one) -> failure; newest last.
        self._errors: OrderedDict[str | int, Failure] = OrderedDict()
        self._unnamed = itertools.count()

    def due(self) -> bool:
        """Whether INTERVAL_S has passed since the last sample (or none was taken)."""
        return self._sampled_at is None or \
            self._clock.monotonic() - self._sampled_at >= INTERVAL_S

    def sample(self, figures: Mapping[Key, tuple[Figures | None, int]]) -> None:
        """One point per deployment in `figures` ({key: (its traffic or None,
        RUNNING replicas)}); the series of deployments not in it are dropped."""
        self._sampled_at = self._clock.monotonic()
        now = self._clock.time()
        for gone in self._series.keys() - figures.keys():
            del self._series[gone]
        for key, (traffic, running) in figures.items():
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = deque(maxlen=POINTS)
            # A sample late by a slow pass, or a clock step, must not keep
            # more than SPAN_S: POINTS alone bounds the count, not the span.
            while series and now - series[0].time >= SPAN_S:
                series.popleft()
            if traffic is None:
                series.append(Point(now, 0.0, 0.0, None, None, running))
            else:
                series.append(Point(now, traffic.requests_per_s, traffic.errors_per_s,
                                    traffic.p50_ms, traffic.p99_ms, running))

    def series(self, application: str, deployment: str) -> list[Point]:
        """The deployment's points of the last SPAN_S, oldest first."""
        now = self._clock.time()
        return [p for p in self._series.get((application, deployment), ())
                if now - p.time < SPAN_S]

    def keys(self) -> list[Key]:
        return list(self._series)

    def add_errors(self, errors: Iterable[api.RecentError]) -> None:
        """A report's failed requests, oldest first."""
        for e in errors:
            failure = Failure(e.time_unix_s, e.application, e.deployment, e.route,
                              e.http_status, e.grpc_code, e.request_id, e.trace_id)
            key: str | int = e.request_id or next(self._unnamed)
            self._errors.pop(key, None)
            self._errors[key] = failure
        while len(self._errors) > MAX_ERRORS:
            self._errors.popitem(last=False)

    def recent_errors(self) -> list[Failure]:
        """The latest failed requests, newest first, one per request id."""
        return list(reversed(self._errors.values()))


class HistorySampler:
    """The reconcile loop's step that takes a point when one is due (loop.py's
    Reconciler, with no keys of its own). `figures` gives each live
    deployment's traffic and RUNNING replicas (the term's)."""

    name = "history"

    def __init__(self, history: TrafficHistory,
                 figures: Callable[[], Mapping[Key, tuple[Figures | None, int]]]) -> None:
        self._history, self._figures = history, figures

    async def begin_pass(self, now: float) -> None:
        pass

    def keys(self) -> Iterable[Key]:
        return ()

    def reconcile(self, key: Key, now: float) -> None:
        pass

    def end_pass(self, now: float) -> None:
        if self._history.due():
            self._history.sample(self._figures())
