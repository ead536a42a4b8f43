"""GetStatus: deployment and application statuses from goals and replica counts.

Pure functions. Replica counts and the planned status come from the reconcile
loop; a controller running without a runtime (--runtime none) observes no
replicas, and a deployment with a positive target is then UPDATING: nothing
runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import groupby

from servefleet.v1 import application_pb2, records_pb2, status_pb2

from ..goals.spec import target_replicas
from ..goals.stored import Unusable
from ..reconcile.autoscale import Decision

DS = status_pb2.DeploymentStatus
AS = status_pb2.ApplicationStatus
# Deployment statuses of an application that is RUNNING: scaling is no trouble.
SERVING = {DS.DEPLOYMENT_STATUS_HEALTHY, DS.DEPLOYMENT_STATUS_UPSCALING,
           DS.DEPLOYMENT_STATUS_DOWNSCALING}

# For a deployment: replica counts per state, the reconciler's (status, message)
# when it has planned the deployment (else None), and the autoscaler's last
# decision when it is autoscaled (else None).
Observed = tuple[Mapping[str, int], tuple[status_pb2.DeploymentStatus, str] | None,
                 Decision | None]
Observer = Callable[[records_pb2.DeploymentRecord], Observed]


def deployment_status(record: records_pb2.DeploymentRecord,
                      observed: Observed) -> status_pb2.DeploymentStatusInfo:
    counts, planned, decision = observed
    target = target_replicas(record)
    if planned is not None:
        status, message = planned
    else:
        # Not planned yet: right after a failover. Replicas found running
        # then (RECOVERING) take traffic as before: the status stays as it was.
        running = counts.get("RUNNING", 0) + counts.get("RECOVERING", 0)
        settled = running == target and sum(counts.values()) == running
        status = DS.DEPLOYMENT_STATUS_HEALTHY if settled else DS.DEPLOYMENT_STATUS_UPDATING
        message = "" if settled else f"{running} of {target} replicas running"
    info = status_pb2.DeploymentStatusInfo(
        name=record.spec.name,
        status=status,
        message=message,
        replica_states=dict(counts),
        target_replicas=target,
        version=record.version,
    )
    if record.spec.replica_config.HasField("autoscaling_config"):
        _autoscaling(info, record, decision)
    return info


def _autoscaling(info: status_pb2.DeploymentStatusInfo, record: records_pb2.DeploymentRecord,
                 decision: Decision | None) -> None:
    """Fill in the autoscaler's view; UPDATING becomes UPSCALING or DOWNSCALING
    when the goal's last change was the autoscaler's (not a deploy)."""
    running = info.replica_states.get("RUNNING", 0)
    scaled_last = (record.HasField("autoscale") and record.autoscale.decided_time.ToNanoseconds()
                   >= record.update_time.ToNanoseconds())
    if info.status == DS.DEPLOYMENT_STATUS_UPDATING and scaled_last:
        info.status = (DS.DEPLOYMENT_STATUS_UPSCALING if running < info.target_replicas
                       else DS.DEPLOYMENT_STATUS_DOWNSCALING)
    info.autoscaling.CopyFrom(status_pb2.AutoscalingStatus(
        current_replicas=running, target_replicas=info.target_replicas,
        load=decision.load if decision else 0.0,
        desired_replicas=decision.desired if decision else info.target_replicas,
        reason=record.autoscale.reason, policy_error=decision.error if decision else ""))


def application_status(name: str, deployments: Sequence[status_pb2.DeploymentStatusInfo]
                       ) -> status_pb2.ApplicationStatusInfo:
    statuses = {d.status for d in deployments}
    if DS.DEPLOYMENT_STATUS_DEPLOY_FAILED in statuses:
        status, word = AS.APPLICATION_STATUS_DEPLOY_FAILED, "failed to deploy"
    elif DS.DEPLOYMENT_STATUS_UNHEALTHY in statuses:
        status, word = AS.APPLICATION_STATUS_UNHEALTHY, "unhealthy"
    elif statuses <= SERVING:
        status, word = AS.APPLICATION_STATUS_RUNNING, ""
    else:
        status, word = AS.APPLICATION_STATUS_DEPLOYING, "deploying"
    troubled = [d.name for d in deployments if d.status not in SERVING]
    message = f"{word}: {', '.join(troubled)}" if word and troubled else ""
    return status_pb2.ApplicationStatusInfo(name=name, status=status, message=message,
                                            deployments=deployments)


def cluster_status(live: Sequence[records_pb2.DeploymentRecord],
                   observe: Observer,
                   applications: Sequence[application_pb2.ApplicationRecord] = (),
                   building: Callable[[str], bool] = lambda name: False,
                   unusable: Sequence[Unusable] = ()) -> list[status_pb2.ApplicationStatusInfo]:
    """One entry per application, in name order: those deployed as applications
    (their records), those that are only deployments (Deploy), and stored
    records the leader set aside (goals/stored.py), as DEPLOY_FAILED."""
    ordered = sorted(live, key=lambda r: (r.spec.application, r.spec.name))
    by_app = {app: [deployment_status(r, observe(r)) for r in records]
              for app, records in groupby(ordered, key=lambda r: r.spec.application)}
    for problem in unusable:
        if problem.name:
            by_app.setdefault(problem.application, []).append(status_pb2.DeploymentStatusInfo(
                name=problem.name, status=DS.DEPLOYMENT_STATUS_DEPLOY_FAILED,
                message=problem.message))
    out = {app: application_status(app, infos) for app, infos in by_app.items()}
    for record in applications:
        name = record.spec.name
        out[name] = application_record_status(record, by_app.get(name, []), building(name))
    for problem in unusable:
        if not problem.name:
            out[problem.application] = status_pb2.ApplicationStatusInfo(
                name=problem.application, status=AS.APPLICATION_STATUS_DEPLOY_FAILED,
                message=problem.message, deployments=by_app.get(problem.application, []))
    return [out[name] for name in sorted(out)]


def application_record_status(record: application_pb2.ApplicationRecord,
                              deployments: Sequence[status_pb2.DeploymentStatusInfo],
                              building: bool) -> status_pb2.ApplicationStatusInfo:
    """An application's status from its build state, then from its deployments."""
    def info(status: status_pb2.ApplicationStatus,
             message: str) -> status_pb2.ApplicationStatusInfo:
        return status_pb2.ApplicationStatusInfo(name=record.spec.name, status=status,
                                                message=message, deployments=deployments)

    if record.deleted:
        return info(AS.APPLICATION_STATUS_DELETING, "deleting its deployments")
    if record.failed_generation == record.generation:
        return info(AS.APPLICATION_STATUS_DEPLOY_FAILED, record.build_error)
    if record.applied_generation != record.generation:
        if building:
            return info(AS.APPLICATION_STATUS_DEPLOYING,
                        f"building {record.spec.import_path}")
        return info(AS.APPLICATION_STATUS_NOT_STARTED, "waiting for the leader to build it")
    return application_status(record.spec.name, deployments)
