"""The proxy's Prometheus metrics (on its HTTP port at /-/metrics).

- servefleet_proxy_requests_total{application, deployment, route, code}:
  answered requests; `route` is the matched route prefix ("" when none
  matched), `code` the HTTP status (499: the client left first).
- servefleet_proxy_request_duration_seconds{application, deployment}: from
  routing to the end of the answer (histogram).
- servefleet_proxy_grpc_calls_total{application, deployment, service, code}:
  gRPC ingress calls; `code` the gRPC status name (CANCELLED: the client
  left first); their durations go to the same histogram as HTTP requests.
- servefleet_proxy_websockets_open{application, deployment} and
  servefleet_proxy_websocket_messages_total{application, deployment,
  direction}: open WebSockets and the messages relayed (websocket.py).
- servefleet_proxy_shadow_copies_total{application, deployment, outcome}:
  copies for a shadow deployment, `sent` or `dropped` (its queue was not
  empty, or too many were in flight).

For the load reports (GetStatus and the dashboard): each deployment's
recent requests, failures and latencies (`traffic`, traffic.py), and the
failed answers since the last report with their request and trace ids
(`errors`, recent_errors.py). A failure is an HTTP status of 500 or above,
or a gRPC ingress call ending with a code other than OK.

Plus, from servefleet/_private/dataplane/metrics.py, retries by reason and queued and
in-flight requests per deployment, and servefleet_watch_reconnects_total.
Labels are names from the config and status codes: never paths, request ids
or user values.
"""

from __future__ import annotations

import os
from typing import Any

from prometheus_client import Counter, Histogram

from servefleet._private.dataplane.recent_errors import RecentErrors
from servefleet._private.dataplane.traffic import TrafficWindow
from servefleet._private.observability.exposition import LATENCY_BUCKETS
from servefleet._private.observability.logs import REQUEST_ID
from servefleet._private.observability.unlocked_metrics import UnlockedCounter, UnlockedHistogram
from servefleet._private.tracing import spans as tracing

_REQUESTS = ("servefleet_proxy_requests", "requests answered by the proxy")
_DURATION = ("servefleet_proxy_request_duration_seconds", "from routing to the end of the answer")
_REQUEST_LABELS, _DURATION_LABELS = ["application", "deployment", "route", "code"], \
    ["application", "deployment"]
REQUESTS: Any
DURATION: Any
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # a worker: summed through prometheus's files
    REQUESTS = Counter(*_REQUESTS, _REQUEST_LABELS)
    DURATION = Histogram(*_DURATION, _DURATION_LABELS, buckets=LATENCY_BUCKETS)
else:  # changed on every request, only on the event loop: no lock (unlocked_metrics.py)
    REQUESTS = UnlockedCounter(*_REQUESTS, _REQUEST_LABELS)
    DURATION = UnlockedHistogram(*_DURATION, _DURATION_LABELS, LATENCY_BUCKETS)
GRPC_CALLS = Counter("servefleet_proxy_grpc_calls", "gRPC calls answered by the proxy",
                     ["application", "deployment", "service", "code"])
SHADOWS = Counter("servefleet_proxy_shadow_copies", "copies for shadow deployments",
                  ["application", "deployment", "outcome"])
CLIENT_LEFT = 499


class ProxyMetrics:
    """Label lookups cached per series: a request costs two dict hits."""

    def __init__(self) -> None:
        # Recent requests per deployment, for the load reports (GetStatus, dashboard).
        self.traffic = TrafficWindow()
        # Failed answers since the last load report (the dashboard lists them).
        self.errors = RecentErrors()
        self._requests: dict[tuple[str, str, str, int], Any] = {}
        self._durations: dict[tuple[str, str], Any] = {}
        self._grpc: dict[tuple[str, str, str, str], Any] = {}

    def answered(self, application: str, deployment: str, route: str, code: int,
                 seconds: float) -> None:
        key = (application, deployment, route, code)
        counter = self._requests.get(key)
        if counter is None:
            counter = self._requests[key] = REQUESTS.labels(application, deployment, route,
                                                            str(code))
        counter.inc()
        histogram = self._durations.get(key[:2])
        if histogram is None:
            histogram = self._durations[key[:2]] = DURATION.labels(application, deployment)
        histogram.observe(seconds)
        failed = code >= 500
        if deployment:
            self.traffic.add(f"{application}/{deployment}", seconds, failed)
        if failed:  # called in the request's task: its ids are the context's
            self.errors.add(application, deployment, route, code, "", REQUEST_ID.get(),
                            tracing.current_ids()[0])

    def grpc_answered(self, application: str, deployment: str, service: str, code: str,
                      seconds: float) -> None:
        if not deployment:  # unrouted: the names are the client's, not the config's
            application = service = ""
        key = (application, deployment, service, code)
        counter = self._grpc.get(key)
        if counter is None:
            counter = self._grpc[key] = GRPC_CALLS.labels(application, deployment, service,
                                                          code)
        counter.inc()
        if deployment:
            histogram = self._durations.get((application, deployment))
            if histogram is None:
                histogram = self._durations[(application, deployment)] = DURATION.labels(
                    application, deployment)
            histogram.observe(seconds)
            self.traffic.add(f"{application}/{deployment}", seconds, code != "OK")
        if code != "OK":
            self.errors.add(application, deployment, service, 0, code, REQUEST_ID.get(),
                            tracing.current_ids()[0])

    @staticmethod
    def shadow(application: str, deployment: str, sent: bool) -> None:
        SHADOWS.labels(application, deployment, "sent" if sent else "dropped").inc()
