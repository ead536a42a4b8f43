"""`serve.status()`: servefleet's GetStatus in the shape of Ray's ServeStatus.

`to_serve_status` is a pure mapping (unit-tested against made-up
responses); `fetch` asks a controller. The mapping:

- application statuses have the same names in both (UNSPECIFIED, which no
  controller sends, reads NOT_STARTED);
- deployment statuses too (UNSPECIFIED reads UPDATING). Ray also says what
  brought a deployment there (`status_trigger`); servefleet does not record
  it, so it is inferred from the status: HEALTHY after a deploy
  CONFIG_UPDATE_COMPLETED, UPDATING CONFIG_UPDATE_STARTED, UPSCALING and
  DOWNSCALING AUTOSCALING, UNHEALTHY HEALTH_CHECK_FAILED, DEPLOY_FAILED
  REPLICA_STARTUP_FAILED, and any deployment of a DELETING application
  DELETING;
- replica counts keep servefleet's state names, which are Ray's
  (STARTING, RUNNING, STOPPING, RECOVERING) as ReplicaState members;
- proxies: by their id, HEALTHY or UNHEALTHY;
- `last_deployed_time_s`: when the application's goal last changed (its
  record's update time, else its newest deployment record's), which GetStatus
  does not carry: `fetch` reads it from ListApplications and List.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from servefleet.client import ControllerClient
from servefleet.v1 import controller_pb2, status_pb2

from .schema import (
    ApplicationStatus,
    ApplicationStatusOverview,
    DeploymentStatus,
    DeploymentStatusOverview,
    DeploymentStatusTrigger,
    ProxyStatus,
    ReplicaState,
    ServeStatus,
)

_DS = status_pb2.DeploymentStatus
_AS = status_pb2.ApplicationStatus
_TRIGGERS = {
    DeploymentStatus.HEALTHY: DeploymentStatusTrigger.CONFIG_UPDATE_COMPLETED,
    DeploymentStatus.UPDATING: DeploymentStatusTrigger.CONFIG_UPDATE_STARTED,
    DeploymentStatus.UPSCALING: DeploymentStatusTrigger.AUTOSCALING,
    DeploymentStatus.DOWNSCALING: DeploymentStatusTrigger.AUTOSCALING,
    DeploymentStatus.UNHEALTHY: DeploymentStatusTrigger.HEALTH_CHECK_FAILED,
    DeploymentStatus.DEPLOY_FAILED: DeploymentStatusTrigger.REPLICA_STARTUP_FAILED,
}


def _word(enum: type, value: int, prefix: str) -> str:
    return enum.Name(value).removeprefix(prefix)  # type: ignore[attr-defined]


def application_status(value: int) -> ApplicationStatus:
    if value == _AS.APPLICATION_STATUS_UNSPECIFIED:
        return ApplicationStatus.NOT_STARTED
    return ApplicationStatus(_word(_AS, value, "APPLICATION_STATUS_"))


def deployment_status(value: int) -> DeploymentStatus:
    if value == _DS.DEPLOYMENT_STATUS_UNSPECIFIED:
        return DeploymentStatus.UPDATING
    return DeploymentStatus(_word(_DS, value, "DEPLOYMENT_STATUS_"))


def _replica_states(counts: Mapping[str, int]) -> dict[ReplicaState | str, int]:
    known = {s.value for s in ReplicaState}
    return {ReplicaState(k) if k in known else k: int(n) for k, n in counts.items()}


def _deployment(info: status_pb2.DeploymentStatusInfo,
                deleting: bool) -> DeploymentStatusOverview:
    status = deployment_status(info.status)
    trigger = DeploymentStatusTrigger.DELETING if deleting else _TRIGGERS[status]
    return DeploymentStatusOverview(status=status, status_trigger=trigger,
                                    replica_states=_replica_states(info.replica_states),
                                    message=info.message)


def to_serve_status(response: controller_pb2.GetStatusResponse,
                    deployed_at: Mapping[str, float] | None = None) -> ServeStatus:
    """Ray's ServeStatus for a GetStatus answer; `deployed_at` gives each
    application's last deploy time (Unix seconds; 0.0 when unknown)."""
    deployed_at = deployed_at or {}
    applications = {}
    for app in response.applications:
        status = application_status(app.status)
        deleting = status is ApplicationStatus.DELETING
        applications[app.name] = ApplicationStatusOverview(
            status=status, message=app.message,
            last_deployed_time_s=float(deployed_at.get(app.name, 0.0)),
            deployments={d.name: _deployment(d, deleting) for d in app.deployments})
    proxies = {p.id or p.address: ProxyStatus.HEALTHY if p.healthy else ProxyStatus.UNHEALTHY
               for p in response.proxies}
    return ServeStatus(proxies=proxies, applications=applications)


def deploy_times(client: ControllerClient) -> dict[str, float]:
    """Each application's last deploy time, from its application record when
    it has one (config-file deploys), else from its newest deployment record."""
    times: dict[str, float] = {}
    for record in client.list():
        if record.deleted:
            continue
        seconds = record.update_time.ToNanoseconds() / 1e9
        app = record.spec.application or "default"
        times[app] = max(times.get(app, 0.0), seconds)
    for app_record in client.applications().applications:
        if app_record.HasField("update_time"):
            times[app_record.spec.name] = app_record.update_time.ToNanoseconds() / 1e9
    return times


def fetch(controllers: str | Sequence[str]) -> ServeStatus:
    """The cluster's status, asked of its controllers."""
    with ControllerClient(controllers, timeout=30) as client:
        response = client.status()
        return to_serve_status(response, deploy_times(client))
