"""GET /api/serve/applications/: the cluster in Ray Serve's ServeInstanceDetails shape.

Built from what GetStatus, ListApplications and ListReplicas answer (the
serving term's status, application records and observed replicas), with
Ray's key names and enum words, so that KubeRay and Ray's REST clients read
it as they read Ray's. What servefleet has no analogue for is present with
a fixed value (docs/guides/rest.md's table says which):

- `controller_info`: the answering controller's advertised address as
  `actor_id` and its host as `node_ip`; `proxy_location` "EveryNode"
  (proxies run wherever they are started); `grpc_options` null (gRPC
  servicers are per application); `target_capacity` null (always full);
  `deploy_mode` "MULTI_APP".
- `proxies`: keyed by proxy id (Ray: node id), from the proxies' Watch
  streams: HEALTHY, or UNHEALTHY once a proxy stops being heard from.
- An application deployed with DeployApplications (a config, a PUT) is
  `source: declarative`, and `deployed_app_config` is its stored spec in
  the config file's shape (what `servefleet config` prints); one made of
  deployments deployed one by one (Deploy, `servefleet.run`) is
  `imperative`, with `deployed_app_config` null.
- A deployment's `status_trigger` is derived from its status (servefleet
  records no trigger); `required_resources` uses Ray's names (CPU, GPU,
  memory); a replica's `actor_id` is the runtime's handle (a pid, a
  container id), `pid` the process id under the process runtime (null
  under others).

Readers see specs as ListApplications shows them to readers: environment
values masked, user_config left out (redact.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from servefleet._private.configuration.config_file import _app_data, _override_data
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import records_pb2, replica_pb2, status_pb2

from ..goals.app_specs import route_of
from .redact import SEE_SECRETS, redacted_application, redacted_deployment

if TYPE_CHECKING:
    from ..term import LeaderTerm

DS = status_pb2.DeploymentStatus
# Ray's DeploymentStatusTrigger for each status (servefleet records none).
TRIGGERS = {DS.DEPLOYMENT_STATUS_UPDATING: "CONFIG_UPDATE_STARTED",
            DS.DEPLOYMENT_STATUS_HEALTHY: "CONFIG_UPDATE_COMPLETED",
            DS.DEPLOYMENT_STATUS_UNHEALTHY: "HEALTH_CHECK_FAILED",
            DS.DEPLOYMENT_STATUS_DEPLOY_FAILED: "REPLICA_STARTUP_FAILED",
            DS.DEPLOYMENT_STATUS_UPSCALING: "AUTOSCALING",
            DS.DEPLOYMENT_STATUS_DOWNSCALING: "AUTOSCALING"}
# Ray's names of the resources a replica asks for.
RESOURCE_NAMES = (("num_cpus", "CPU"), ("num_gpus", "GPU"), ("memory_bytes", "memory"))
NO_ACTOR = {"node_id": None, "node_ip": None, "node_instance_id": None, "actor_id": None,
            "actor_name": None, "worker_id": None, "log_file_path": None}


def _word(enum: Any, value: int, prefix: str, default: str) -> str:
    word = enum.Name(value).removeprefix(prefix)
    return default if word == "UNSPECIFIED" else word


def _host(address: str) -> str | None:
    host = address.rpartition(":")[0].strip("[]")
    return host or None


def _seconds(stamp: Any) -> float:
    return stamp.ToNanoseconds() / 1e9


def instance_details(term: LeaderTerm, identity: str, role: str) -> dict[str, Any]:
    """The whole ServeInstanceDetails of the serving term, as `role` may see it."""
    secrets = role in SEE_SECRETS
    records = {r.spec.name: r if secrets else redacted_application(r)
               for r in term.applications.live()}
    deployments = {(r.spec.application, r.spec.name): r if secrets else redacted_deployment(r)
                   for r in term.deployments.live()}
    replicas: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for info in term.replica_infos():
        key = (info.record.application, info.record.deployment)
        replicas.setdefault(key, []).append(replica_details(info))
    status = term.status_response("", identity, [])
    http = term.applications.http_options
    return {
        "controller_info": {**NO_ACTOR, "node_ip": _host(identity), "actor_id": identity,
                            "actor_name": "servefleet controller"},
        "proxy_location": "EveryNode",
        "http_options": {k: v for k, v in (("host", http.host), ("port", http.port),
                                           ("request_timeout_s", http.request_timeout_s),
                                           ("max_request_body_bytes",
                                            http.max_request_body_bytes)) if v},
        "grpc_options": None,
        "proxies": {p.id: {**NO_ACTOR, "node_id": p.id, "node_ip": _host(p.address),
                           "actor_name": p.address,
                           "status": "HEALTHY" if p.healthy else "UNHEALTHY"}
                    for p in status.proxies},
        "deploy_mode": "MULTI_APP",
        "applications": {app.name: application_details(
            app, records.get(app.name), deployments, replicas) for app in status.applications
            if app.status != status_pb2.APPLICATION_STATUS_DELETING or app.deployments},
        "target_capacity": None,
    }


def application_details(app: status_pb2.ApplicationStatusInfo,
                        record: apb.ApplicationRecord | None,
                        deployments: dict[tuple[str, str], records_pb2.DeploymentRecord],
                        replicas: dict[tuple[str, str], list[dict[str, Any]]]
                        ) -> dict[str, Any]:
    mine = [deployments[(app.name, d.name)] for d in app.deployments
            if (app.name, d.name) in deployments]
    if record is not None:
        route = route_of(record.spec)
        deployed = _seconds(record.update_time)
    else:
        routed = [r.spec.route_prefix for r in mine if r.spec.HasField("route_prefix")]
        route = routed[0] if routed else None
        deployed = max((_seconds(r.update_time) for r in mine), default=0.0)
    return {
        "name": app.name,
        "route_prefix": route,
        "docs_path": None,
        "status": _word(status_pb2.ApplicationStatus, app.status, "APPLICATION_STATUS_",
                        "NOT_STARTED"),
        "message": app.message,
        "last_deployed_time_s": deployed,
        "deployed_app_config": _app_data(record.spec) if record is not None else None,
        "source": "declarative" if record is not None else "imperative",
        "deployments": {d.name: deployment_details(
            d, deployments.get((app.name, d.name)), replicas.get((app.name, d.name), []))
            for d in app.deployments},
        "external_scaler_enabled": False,
    }


def deployment_details(info: status_pb2.DeploymentStatusInfo,
                       record: records_pb2.DeploymentRecord | None,
                       replicas: Sequence[dict[str, Any]]) -> dict[str, Any]:
    config: dict[str, Any] = {"name": info.name}
    resources: dict[str, float] = {}
    if record is not None:
        config = _override_data(apb.DeploymentOverride(
            name=info.name, replica_config=record.spec.replica_config))
        have = record.spec.replica_config.resources
        resources = {ray: float(getattr(have, ours)) for ours, ray in RESOURCE_NAMES
                     if getattr(have, ours)}
        resources.update(have.custom)
    return {
        "name": info.name,
        "status": _word(DS, info.status, "DEPLOYMENT_STATUS_", "UPDATING"),
        "status_trigger": TRIGGERS.get(info.status, "UNSPECIFIED"),
        "message": info.message,
        "deployment_config": config,
        "target_num_replicas": info.target_replicas,
        "required_resources": resources,
        "replicas": list(replicas),
    }


def replica_details(info: replica_pb2.ReplicaInfo) -> dict[str, Any]:
    record = info.record
    # The process runtime's handle is "PID:START_TIME".
    head = record.handle.partition(":")[0]
    pid = int(head) if record.runtime == "process" and head.isdigit() else None
    return {**NO_ACTOR,
            "node_ip": _host(record.http_address or record.control_address),
            "actor_id": record.handle or None,
            "actor_name": record.replica_id,
            "replica_id": record.replica_id,
            "state": _word(replica_pb2.ReplicaState, info.state, "REPLICA_STATE_", "STARTING"),
            "pid": pid,
            "start_time_s": _seconds(record.created_time)}
