"""Load reports from proxies and handles, per deployment (soft state).

Each reporter tells, per deployment, the requests it holds queued and those
it sent to replicas and awaits (ongoing). Its latest report replaces its
previous one; a report older than STALE_S no longer counts (the reporter may
be gone). `total` (queued + ongoing over all reporters) is the autoscaler's
load signal; GetStatus shows `queued`. Kept per leader term: a new leader
starts empty and fills up within one report period. Reports also name the
replicas their reporter has ejected, or would have but may not (the last
replica of a pool): `suspects`, which the replica reconciler health-checks
at once. A proxy's reports also carry its recent traffic per deployment
(requests, failures, p50/p99: `traffic`, summed here for GetStatus and the
dashboard's history) and the answers that failed since its previous report:
checked here, then handed to `on_errors` (the term's traffic history keeps
the latest for the dashboard).

What one reporter holds is bounded by what one report may carry (MAX_KEYS
deployments and replica ids per field); a reporter that stops reporting is
forgotten STALE_S after its last report, swept at most once a second on the
next report or read. The StreamLoad handler takes one report at a time (the
rest wait in gRPC's flow control, at the client), and one stream reports
for one reporter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from servefleet.v1 import controller_pb2 as api

from .clock import Clock
from .errors import InvalidArgument
from .goals.spec import check_name

STALE_S = 10.0
# Traffic figures count only from reports this recent (reporters send every 0.5 s).
TRAFFIC_STALE_S = 2.0
MAX_KEYS = 10_000
MAX_QUEUED = 10_000_000
# A report's recent errors: as many as a proxy sends (recent_errors.py), bounded fields.
MAX_RECENT_ERRORS = 20
MAX_ID = 128
MAX_ROUTE = 256
TRACE_ID = re.compile(r"[0-9a-f]{32}")
GRPC_CODE = re.compile(r"[A-Z][A-Z_]{0,31}")
Key = tuple[str, str]
# One reporter's figures for a deployment: (requests/s, requests, p50 ms, p99 ms, errors/s).
_Figures = tuple[float, int, float, float, float]


class Traffic(NamedTuple):
    """One deployment's figures summed over the fresh reports."""

    requests_per_s: float
    errors_per_s: float
    p50_ms: float
    p99_ms: float


def check_recent_errors(errors: Sequence[api.RecentError]) -> None:
    """InvalidArgument naming the field of the first bad one."""
    if len(errors) > MAX_RECENT_ERRORS:
        raise InvalidArgument("recent_errors", f"at most {MAX_RECENT_ERRORS}")
    for i, e in enumerate(errors):
        field = f"recent_errors[{i}]"
        if not (math.isfinite(e.time_unix_s) and e.time_unix_s > 0):
            raise InvalidArgument(f"{field}.time_unix_s", "a finite time after 1970")
        for name, value in (("application", e.application), ("deployment", e.deployment)):
            if value:
                check_name(f"{field}.{name}", value)
        if e.deployment and not e.application:
            raise InvalidArgument(f"{field}.application", "needed with a deployment")
        if bool(e.grpc_code) == bool(e.http_status):
            raise InvalidArgument(f"{field}.http_status", "one of http_status and "
                                  "grpc_code, not both")
        if e.http_status and not 100 <= e.http_status <= 599:
            raise InvalidArgument(f"{field}.http_status", "between 100 and 599")
        if e.grpc_code and not GRPC_CODE.fullmatch(e.grpc_code):
            raise InvalidArgument(f"{field}.grpc_code", "a gRPC status code's name")
        if len(e.route) > MAX_ROUTE:
            raise InvalidArgument(f"{field}.route", f"at most {MAX_ROUTE} characters")
        if len(e.request_id) > MAX_ID:
            raise InvalidArgument(f"{field}.request_id", f"at most {MAX_ID} characters")
        if e.trace_id and not TRACE_ID.fullmatch(e.trace_id):
            raise InvalidArgument(f"{field}.trace_id", "32 lowercase hex digits, or empty")


class ReportKeys:
    """'application/deployment' keys of a report's maps, checked once (then
    remembered: reporters send the same keys every second); InvalidArgument
    naming the map's entry."""

    def __init__(self) -> None:
        self._known: dict[str, Key] = {}

    def __call__(self, field: str, text: str) -> Key:
        known = self._known.get(text)
        if known is not None:
            return known
        named = f"{field}[{text!r}]"
        app, sep, name = text.partition("/")
        if not sep:
            raise InvalidArgument(named, "keys are 'application/deployment'")
        check_name(named, app)
        check_name(named, name)
        if len(self._known) >= 10 * MAX_KEYS:
            self._known.clear()
        self._known[text] = (app, name)
        return (app, name)


class LoadReports:
    def __init__(self, clock: Clock | None = None,
                 on_errors: Callable[[Sequence[api.RecentError]], None] | None = None) -> None:
        self._clock = clock or Clock()
        # Where a good report's recent errors go (the term's TrafficHistory).
        self._on_errors = on_errors
        # reporter -> (when, {deployment: (queued, ongoing)})
        self._reports: dict[str, tuple[float, dict[Key, tuple[int, int]]]] = {}
        # The sums over the reports held, kept as reports come and go, so
        # that reading one deployment's load does not visit every reporter.
        self._totals: dict[Key, tuple[int, int]] = {}
        self._key = ReportKeys()
        # reporter -> (when, the replica ids it has ejected)
        self._ejected: dict[str, tuple[float, frozenset[str]]] = {}
        # reporter -> (when, {deployment: _Figures})
        self._traffic: dict[str, tuple[float, dict[Key, _Figures]]] = {}
        self._swept_at = self._clock.monotonic()

    def record(self, reporter_id: str, queued: Mapping[str, int],
               ongoing: Mapping[str, int] | None = None,
               traffic: Mapping[str, api.DeploymentTraffic] | None = None,
               ejected: Sequence[str] = (), suspected: Sequence[str] = (),
               recent_errors: Sequence[api.RecentError] = ()) -> None:
        """Store a report; InvalidArgument (nothing stored) on a bad one."""
        self._sweep()
        if not reporter_id or len(reporter_id) > 128:
            raise InvalidArgument("reporter_id", "must be 1-128 characters")
        for field, ids in (("ejected", ejected), ("suspected", suspected)):
            if len(ids) > MAX_KEYS or any(not 0 < len(r) <= 128 for r in ids):
                raise InvalidArgument(field, f"at most {MAX_KEYS} replica ids of 1-128 "
                                      "characters")
        ejected = [*ejected, *suspected]  # both are health-checked at once
        seen = self._parse_traffic(traffic or {})
        check_recent_errors(recent_errors)
        parsed: dict[Key, tuple[int, int]] = {}
        for field, counts in (("queued", queued), ("ongoing", ongoing or {})):
            if len(counts) > MAX_KEYS:
                raise InvalidArgument(field, f"at most {MAX_KEYS} deployments")
            for text, count in counts.items():
                key = self._key(field, text)
                if count > MAX_QUEUED:
                    raise InvalidArgument(f"{field}[{text!r}]", f"at most {MAX_QUEUED}")
                before = parsed.get(key, (0, 0))
                parsed[key] = (count, before[1]) if field == "queued" else (before[0], count)
        self._forget(reporter_id)
        self._reports[reporter_id] = (self._clock.monotonic(), parsed)
        self._add(parsed, 1)
        if seen or reporter_id in self._traffic:
            self._traffic[reporter_id] = (self._clock.monotonic(), seen)
        if ejected:
            self._ejected[reporter_id] = (self._clock.monotonic(), frozenset(ejected))
        else:
            self._ejected.pop(reporter_id, None)
        if recent_errors and self._on_errors is not None:
            self._on_errors(recent_errors)

    def suspects(self) -> set[str]:
        """Replicas a reporter ejected, by its reports of the last TRAFFIC_STALE_S
        (passive health: they held requests and answered none)."""
        now = self._clock.monotonic()
        return {replica for at, ids in self._ejected.values() if now - at < TRAFFIC_STALE_S
                for replica in ids}

    def _parse_traffic(self, traffic: Mapping[str, api.DeploymentTraffic]
                       ) -> dict[Key, _Figures]:
        """{key: _Figures}; InvalidArgument when bad."""
        if len(traffic) > MAX_KEYS:
            raise InvalidArgument("traffic", f"at most {MAX_KEYS} deployments")
        out = {}
        for text, t in traffic.items():
            key = self._key("traffic", text)
            figures = (t.window_s, t.p50_ms, t.p99_ms)
            if not (0 < t.window_s <= 3600 and all(math.isfinite(f) and f >= 0 for f in figures)
                    and t.errors <= t.requests <= MAX_QUEUED * 100):
                raise InvalidArgument(f"traffic[{text!r}]", "window_s in (0, 3600], finite "
                                      "non-negative latencies, a sane request count, "
                                      "errors at most requests")
            out[key] = (t.requests / t.window_s, t.requests, t.p50_ms, t.p99_ms,
                        t.errors / t.window_s)
        return out

    def traffic(self, application: str, deployment: str) -> Traffic | None:
        """The deployment's figures over the fresh reports: rates added up, p50
        weighted by requests, the highest p99; None without any."""
        now = self._clock.monotonic()
        key = (application, deployment)
        found = [figures[key] for at, figures in self._traffic.values()
                 if now - at < TRAFFIC_STALE_S and key in figures]
        requests = sum(f[1] for f in found)
        if not requests:
            return None
        return Traffic(sum(f[0] for f in found), sum(f[4] for f in found),
                       sum(f[1] * f[2] for f in found) / requests, max(f[3] for f in found))

    def _add(self, counts: dict[Key, tuple[int, int]], sign: int) -> None:
        for key, (queued, ongoing) in counts.items():
            q, o = self._totals.get(key, (0, 0))
            q, o = q + sign * queued, o + sign * ongoing
            if q or o:
                self._totals[key] = (q, o)
            else:
                self._totals.pop(key, None)

    def _forget(self, reporter_id: str) -> None:
        if self._clock.monotonic() - self._traffic.get(reporter_id, (0.0, {}))[0] \
                >= TRAFFIC_STALE_S:
            self._traffic.pop(reporter_id, None)
        old = self._reports.pop(reporter_id, None)
        if old is not None:
            self._add(old[1], -1)

    def _sweep(self) -> None:
        """Drop the reports gone stale (at most once a second)."""
        now = self._clock.monotonic()
        if now - self._swept_at < 1.0:
            return
        self._swept_at = now
        for reporter_id in [r for r, (at, _) in self._reports.items() if now - at >= STALE_S]:
            self._forget(reporter_id)
        for held in (self._ejected, self._traffic):
            for reporter_id in [r for r, (at, _) in held.items() if now - at >= STALE_S]:
                del held[reporter_id]

    def queued(self, application: str, deployment: str) -> int:
        self._sweep()
        return self._totals.get((application, deployment), (0, 0))[0]

    def total(self, application: str, deployment: str) -> int:
        """Queued plus ongoing requests for the deployment, over all reporters."""
        self._sweep()
        return sum(self._totals.get((application, deployment), (0, 0)))
