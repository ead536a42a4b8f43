"""The replica's Prometheus metrics (served on its metrics port, /metrics).

Every series carries `application`, `deployment` and `replica` (fixed for
the process); the rest of the labels are bounded enums:

- servefleet_replica_requests_total{outcome="ok"|"error"}: requests that
  reached user code (HTTP and handle calls); error: user code raised.
- servefleet_replica_request_duration_seconds: time in user code and the
  response, per request (histogram).
- servefleet_replica_ongoing_requests: requests in flight now.
- servefleet_replica_rejections_total{reason="overloaded"|"loading"|"draining"}:
  requests refused before user code (the caller may retry elsewhere).
- servefleet_replica_reconfigures_total{result="ok"|"error"}: user_config
  applied (reconfigure) or refused.
- servefleet_replica_health_checks_total{result="ok"|"error"}: check_health runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from servefleet._private.observability.exposition import LATENCY_BUCKETS
from servefleet._private.observability.unlocked_metrics import UnlockedCounter, UnlockedHistogram

LABELS = ("application", "deployment", "replica")
# Changed on every request, only from the event loop (HTTP, gRPC and
# WebSockets are all served there): no lock (unlocked_metrics.py).
# (prometheus_client's own where its multiprocess files are read instead:
# PROMETHEUS_MULTIPROC_DIR in a replica's environment.)
_MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
_Counter: Any = Counter if _MULTIPROCESS else UnlockedCounter
REQUESTS = _Counter("servefleet_replica_requests", "requests that reached user code",
                    [*LABELS, "outcome"])
DURATION: Any = (Histogram if _MULTIPROCESS else UnlockedHistogram)(
    "servefleet_replica_request_duration_seconds", "time in user code and the response",
    LABELS, buckets=LATENCY_BUCKETS)
ONGOING = Gauge("servefleet_replica_ongoing_requests", "requests in flight", LABELS)
REJECTIONS = _Counter("servefleet_replica_rejections", "requests refused before user code",
                      [*LABELS, "reason"])
RECONFIGURES = Counter("servefleet_replica_reconfigures", "user_config applications",
                       [*LABELS, "result"])
HEALTH_CHECKS = Counter("servefleet_replica_health_checks", "check_health runs",
                        [*LABELS, "result"])
REASONS = ("overloaded", "loading", "draining", "unauthenticated")
RESULTS = ("ok", "error")


class ReplicaMetrics:
    """The series of one replica, bound once (no label lookups per request)."""

    def __init__(self, application: str, deployment: str, replica: str,
                 ongoing: Callable[[], float]) -> None:
        labels = (application, deployment, replica)
        self.application, self.deployment = application, deployment
        # The same names as attributes of this replica's spans (tracing.py).
        self.span_attributes = {"servefleet.application": application,
                                "servefleet.deployment": deployment,
                                "servefleet.replica": replica}
        self.ok = REQUESTS.labels(*labels, "ok")
        self.error = REQUESTS.labels(*labels, "error")
        self.duration = DURATION.labels(*labels)
        self.rejected = {r: REJECTIONS.labels(*labels, r) for r in REASONS}
        self.reconfigured = {r: RECONFIGURES.labels(*labels, r) for r in RESULTS}
        self.health = {r: HEALTH_CHECKS.labels(*labels, r) for r in RESULTS}
        ONGOING.labels(*labels).set_function(ongoing)
