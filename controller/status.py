"""GetStatus: deployment and application statuses from goals and replica counts.

Pure functions. The replica counts per state come from whoever observes the
replicas (the reconcile loop); with none observed a deployment with a positive
target is UPDATING, which is what it is: nothing runs yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import groupby

from servefleet.v1 import records_pb2, status_pb2

DS = status_pb2.DeploymentStatus
AS = status_pb2.ApplicationStatus

ReplicaCounts = Callable[[records_pb2.DeploymentRecord], Mapping[str, int]]


def target_replicas(record: records_pb2.DeploymentRecord) -> int:
    config = record.spec.replica_config
    if config.HasField("autoscaling_config"):
        return config.autoscaling_config.initial_replicas
    return config.num_replicas


def deployment_status(record: records_pb2.DeploymentRecord,
                      counts: Mapping[str, int]) -> status_pb2.DeploymentStatusInfo:
    target = target_replicas(record)
    running = counts.get("RUNNING", 0)
    settled = running == target and sum(counts.values()) == running
    return status_pb2.DeploymentStatusInfo(
        name=record.spec.name,
        status=DS.DEPLOYMENT_STATUS_HEALTHY if settled else DS.DEPLOYMENT_STATUS_UPDATING,
        message="" if settled else f"{running} of {target} replicas running",
        replica_states=dict(counts),
        target_replicas=target,
        version=record.version,
    )


def application_status(name: str, deployments: Sequence[status_pb2.DeploymentStatusInfo]
                       ) -> status_pb2.ApplicationStatusInfo:
    statuses = {d.status for d in deployments}
    if DS.DEPLOYMENT_STATUS_DEPLOY_FAILED in statuses:
        status, word = AS.APPLICATION_STATUS_DEPLOY_FAILED, "failed to deploy"
    elif DS.DEPLOYMENT_STATUS_UNHEALTHY in statuses:
        status, word = AS.APPLICATION_STATUS_UNHEALTHY, "unhealthy"
    elif statuses <= {DS.DEPLOYMENT_STATUS_HEALTHY}:
        status, word = AS.APPLICATION_STATUS_RUNNING, ""
    else:
        status, word = AS.APPLICATION_STATUS_DEPLOYING, "deploying"
    troubled = [d.name for d in deployments if d.status != DS.DEPLOYMENT_STATUS_HEALTHY]
    message = f"{word}: {', '.join(troubled)}" if word and troubled else ""
    return status_pb2.ApplicationStatusInfo(name=name, status=status, message=message,
                                            deployments=deployments)


def cluster_status(live: Sequence[records_pb2.DeploymentRecord],
                   counts: ReplicaCounts) -> list[status_pb2.ApplicationStatusInfo]:
    """One entry per application, in name order, from its live deployments."""
    ordered = sorted(live, key=lambda r: (r.spec.application, r.spec.name))
    return [
        application_status(app, [deployment_status(r, counts(r)) for r in records])
        for app, records in groupby(ordered, key=lambda r: r.spec.application)
    ]
