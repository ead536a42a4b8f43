"""The dashboard's data: one JSON snapshot of the cluster (GET /api/status).

Everything `servefleet status` shows, plus each deployment's replicas (state,
version, address, uptime, message), its route, and the last errors (failed
deployments and replicas with a failure message). The page at
/-/dashboard (dashboard.html, shipped in the package: no CDN) polls it every
second. Field names follow the protos (status.proto, replica.proto).
"""

from __future__ import annotations

import time
from importlib import resources
from typing import TYPE_CHECKING, Any

from servefleet._private.messages import message_dict
from servefleet.v1 import replica_pb2, status_pb2

if TYPE_CHECKING:
    from ..term import LeaderTerm

FAILING = {status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED, status_pb2.DEPLOYMENT_STATUS_UNHEALTHY}


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
    for info in term.replica_infos():
        record = info.record
        created = record.created_time.ToNanoseconds() / 1e9 if record.created_time.seconds else 0
        state = replica_pb2.ReplicaState.Name(info.state).removeprefix("REPLICA_STATE_")
        replicas.setdefault((record.application, record.deployment), []).append({
            "replica_id": record.replica_id, "state": state, "version": record.version,
            "http_address": record.http_address,
            "uptime_s": round(now - created, 1) if created else None,
            "message": info.message})
        if info.message and state != "RUNNING":
            errors.append({"where": f"{record.application}/{record.deployment}/"
                                    f"{record.replica_id}", "message": info.message})
    for app in term.status():
        for dep in app.deployments:
            if dep.status in FAILING and dep.message:
                errors.append({"where": f"{app.name}/{dep.name}", "message": dep.message})
    for app in status["applications"]:
        routed = [routes[(app["name"], d["name"])] for d in app["deployments"]
                  if (app["name"], d["name"]) in routes]
        app["route_prefix"] = routed[0] if routed else None
        for dep in app["deployments"]:
            dep["replicas"] = replicas.get((app["name"], dep["name"]), [])
    status["errors"] = errors
    status["time"] = now
    return status
