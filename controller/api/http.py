"""The controller's HTTP face (--metrics-listen): metrics, scrape discovery, dashboard.

- GET /metrics: this controller's metrics (Prometheus text format).
- GET /-/metrics-targets: every scrape target of the cluster, in Prometheus
  `http_sd` format: the controllers' metrics endpoints, each proxy's
  /-/metrics on its HTTP port, and each replica's metrics port, labelled
  with `component` (and `application`, `deployment`, `replica` for
  replicas). A standby lists only the controllers: give Prometheus every
  controller's URL and it merges what they answer.
  A Prometheus job with `http_sd_configs: [{url: http://CONTROLLER/-/metrics-targets}]`
  follows replicas as they come and go.
- GET /-/dashboard: a live page of the cluster; GET /api/status and
  GET /api/history: its data (dashboard.py). A standby answers both 503
  with the leader.
- PUT, GET and DELETE /api/serve/applications/ (Ray Serve's REST API) and
  GET /api/openapi.json: rest.py.

Who may read it, and under which host names: http_gate.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from servefleet._private.observability.exposition import send_body, send_metrics
from servefleet.v1 import watch_pb2

from . import dashboard, rest
from .http_gate import HttpGate

if TYPE_CHECKING:
    from ..term import LeaderTerm


def scrape_targets(term: LeaderTerm, controllers: list[str]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = []
    if controllers:
        groups.append({"targets": sorted(controllers), "labels": {"component": "controller"}})
    proxies = sorted({w.address for w in list(term.publisher.watchers.values())
                      if w.kind == watch_pb2.WATCHER_KIND_PROXY and w.address})
    if proxies:
        groups.append({"targets": proxies,
                       "labels": {"component": "proxy", "__metrics_path__": "/-/metrics"}})
    records = [r.record for observation in term.observed.deployments.values()
               for r in observation.replicas]
    for record in sorted(records, key=lambda r: r.replica_id):
        if record.metrics_address and not record.stopping:
            groups.append({"targets": [record.metrics_address],
                           "labels": {"component": "replica",
                                      "application": record.application,
                                      "deployment": record.deployment,
                                      "replica": record.replica_id}})
    return groups


class ControllerHttp:
    """ASGI app; `term()` is the serving term or None, `controllers()` the
    metrics addresses of the live controllers, `leader()` the leader's address."""

    def __init__(self, term: Callable[[], LeaderTerm | None],
                 controllers: Callable[[], list[str]], leader: Callable[[], str | None],
                 cluster: str = "", identity: str = "",
                 grpc_controllers: Callable[[], list[str]] = list,
                 gate: HttpGate | None = None) -> None:
        self._gate = gate
        self._term = term
        self._controllers = controllers
        self._leader = leader
        self._cluster = cluster
        self._identity = identity
        self._grpc_controllers = grpc_controllers
        self._rest = rest.RestApi(term, leader, identity)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        refused = self._gate.refusal(scope) if self._gate is not None else None
        if refused is not None:
            status, why = refused
            await send_body(send, status, why.encode() + b"\n", b"text/plain; charset=utf-8")
            return
        path = scope["path"]
        if path in rest.PATHS:
            role = self._gate.caller_role(scope) if self._gate is not None else "admin"
            await self._rest(scope, receive, send, role)
        elif scope["method"] not in ("GET", "HEAD"):  # the rest only reads
            await send({"type": "http.response.start", "status": 405,
                        "headers": [(b"allow", b"GET, HEAD"), (b"content-length", b"0")]})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/metrics":
            await send_metrics(send)
        elif path in ("/-/dashboard", "/-/dashboard/"):
            await send_body(send, 200, dashboard.page(), b"text/html; charset=utf-8")
        elif path in ("/api/status", "/api/history"):
            term = self._term()
            if term is None:
                await send_body(send, 503, json.dumps({"standby": True, "leader": self._leader()})
                            .encode(), b"application/json")
                return
            data = dashboard.history(term) if path == "/api/history" else dashboard.snapshot(
                term, self._cluster, self._identity, self._grpc_controllers())
            await send_body(send, 200, json.dumps(data).encode(), b"application/json")
        elif path == "/-/metrics-targets":
            term = self._term()
            if term is None:  # a standby knows the controllers, not the rest
                controllers = sorted(self._controllers())
                groups = [{"targets": controllers, "labels": {"component": "controller"}}]
                body = json.dumps(groups if controllers else []).encode()
                await send_body(send, 200, body, b"application/json")
                return
            body = json.dumps(scrape_targets(term, self._controllers())).encode()
            await send_body(send, 200, body, b"application/json")
        else:
            await send_body(send, 404, b"servefleet controller: /metrics, /-/metrics-targets, "
                        b"/-/dashboard, /api/status, /api/history, /api/serve/applications/, "
                        b"/api/openapi.json\n", b"text/plain")
