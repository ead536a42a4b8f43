"""The dashboard's data: one JSON snapshot of the cluster (GET /api/status)
and fifteen minutes of traffic per deployment (GET /api/history).

/api/status: everything `servefleet status` shows, plus each deployment's
replicas (state, version, address, uptime, message), its route, the last
errors (failed deployments and replicas with a failure message) and
`recent_errors`, the latest failed requests the proxies reported (newest
first, with their request and trace ids). The page at /-/dashboard
(dashboard.html, shipped in the package: no CDN) polls it every second.
Field names follow the protos (status.proto, replica.proto, controller.proto's
RecentError).

/api/history: the term's TrafficHistory (traffic_history.py), one series
per deployment as columns (`t`, `requests_per_s`, `errors_per_s`, `p50_ms`,
`p99_ms`, `running`; null latencies where no requests were reported). A
separate endpoint, polled every `interval_s`, rather than more of
/api/status: its points change once per interval while the status changes
every second, and at 180 points per deployment it is most of the bytes;
sending it with every status poll would multiply what the page fetches by
several times for nothing. Failed requests stay in /api/status, so one
shows within a second of its proxy's report.

`models` (on a deployment whose replicas record llm_* or embedding_*
metrics): per model, time to first token p50/p99, time per output token p50
and tokens per second over the last seconds (an embedding model: batch
size, tokens per batch, padding share, queue wait, inputs per second), from
the RUNNING replicas' /metrics, scraped while the page is polled
(model_scrape.py, model_figures.py). Soft state of the serving term: a new
leader starts without it.
"""

from __future__ import annotations

import time
import weakref
from importlib import resources
from typing import TYPE_CHECKING, Any

from servefleet._private.messages import message_dict
from servefleet.v1 import replica_pb2, status_pb2

from ..traffic_history import INTERVAL_S, SPAN_S
from .model_scrape import ModelScraper, Target

if TYPE_CHECKING:
    from ..term import LeaderTerm

FAILING = {status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED, status_pb2.DEPLOYMENT_STATUS_UNHEALTHY}

# One scraper per serving term, gone with it (its samples are soft state).
_scrapers: weakref.WeakKeyDictionary[LeaderTerm, ModelScraper] = weakref.WeakKeyDictionary()


def model_scraper(term: LeaderTerm) -> ModelScraper:
    """The term's scraper of model figures, made on first use."""
    scraper = _scrapers.get(term)
    if scraper is None:
        scraper = _scrapers[term] = ModelScraper()
    return scraper


def page() -> bytes:
    return resources.files(__package__).joinpath("dashboard.html").read_bytes()


def snapshot(term: LeaderTerm, cluster: str, leader: str,
             controllers: list[str]) -> dict[str, Any]:
    now = time.time()
    status = message_dict(term.status_response(cluster, leader, controllers))
    routes = {(r.spec.application, r.spec.name): r.spec.route_prefix
              for r in term.deployments.live() if r.spec.HasField("route_prefix")}
    replicas: dict[tuple[str, str], list[dict[str, Any]]] = {}
    errors: list[dict[str, str]] = []
    targets: list[Target] = []
    for info in term.replica_infos():
        record = info.record
        created = record.created_time.ToNanoseconds() / 1e9 if record.created_time.seconds else 0
        state = replica_pb2.ReplicaState.Name(info.state).removeprefix("REPLICA_STATE_")
        replicas.setdefault((record.application, record.deployment), []).append({
            "replica_id": record.replica_id, "state": state, "version": record.version,
            "http_address": record.http_address,
            "uptime_s": round(now - created, 1) if created else None,
            "message": info.message})
        if state == "RUNNING" and record.metrics_address and not record.stopping:
            targets.append(Target(record.replica_id, record.application, record.deployment,
                                  record.metrics_address))
        if info.message and state != "RUNNING":
            errors.append({"where": f"{record.application}/{record.deployment}/"
                                    f"{record.replica_id}", "message": info.message})
    for app in term.status():
        for dep in app.deployments:
            if dep.status in FAILING and dep.message:
                errors.append({"where": f"{app.name}/{dep.name}", "message": dep.message})
    scraper = model_scraper(term)
    scraper.poll(targets)
    for app in status["applications"]:
        routed = [routes[(app["name"], d["name"])] for d in app["deployments"]
                  if (app["name"], d["name"]) in routes]
        app["route_prefix"] = routed[0] if routed else None
        for dep in app["deployments"]:
            dep["replicas"] = replicas.get((app["name"], dep["name"]), [])
            models = scraper.figures.of(app["name"], dep["name"])
            if models:
                dep["models"] = models
    status["errors"] = errors
    status["recent_errors"] = [e._asdict() for e in term.history.recent_errors()]
    status["time"] = now
    return status


def history(term: LeaderTerm) -> dict[str, Any]:
    """GET /api/history: each deployment's series, as columns."""
    series = []
    for application, deployment in sorted(term.history.keys()):
        points = term.history.series(application, deployment)
        series.append({
            "application": application, "deployment": deployment,
            "t": [round(p.time, 3) for p in points],
            "requests_per_s": [round(p.requests_per_s, 3) for p in points],
            "errors_per_s": [round(p.errors_per_s, 3) for p in points],
            "p50_ms": [None if p.p50_ms is None else round(p.p50_ms, 3) for p in points],
            "p99_ms": [None if p.p99_ms is None else round(p.p99_ms, 3) for p in points],
            "running": [p.running for p in points]})
    return {"time": time.time(), "interval_s": INTERVAL_S, "span_s": SPAN_S,
            "deployments": series}
