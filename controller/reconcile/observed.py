"""What the API reports about replicas, read from the reconcile loop's soft state.

Pure reads of `Reconciler.views`, `.records` and `.plans`: the replica sets the
Watch stream publishes, the counts and statuses of GetStatus, and
ListReplicas. Nothing here changes the loop's state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from servefleet.v1 import records_pb2, replica_pb2, status_pb2

from .planner import RECOVERING, RUNNING

if TYPE_CHECKING:
    from .replicas import Reconciler

RS = replica_pb2.ReplicaState
DKey = tuple[str, str]


def running_records(loop: Reconciler, application: str,
                    deployment: str) -> list[replica_pb2.ReplicaRecord]:
    """Registry records of the replicas that may take traffic: RUNNING ones, and
    RECOVERING ones (found after a failover, serving until a probe says not),
    so proxies keep their replica sets across a failover."""
    return [loop.records[v.replica_id]
            for v in loop.views.get((application, deployment), {}).values()
            if v.state in (RUNNING, RECOVERING) and not v.failure]


def replica_counts(loop: Reconciler, key: DKey) -> dict[str, int]:
    counts: dict[str, int] = {}
    for view in loop.views.get(key, {}).values():
        name = RS.Name(view.state).removeprefix("REPLICA_STATE_")
        counts[name] = counts.get(name, 0) + 1
    return counts


def planned_status(loop: Reconciler,
                   record: records_pb2.DeploymentRecord) -> tuple[int, str] | None:
    """(status, message) of the last plan, or None if none was made yet.

    A plan made for an older goal says nothing about the new one: the
    deployment is then updating until the next tick plans it.
    """
    from .replicas import goal_of

    planned = loop.plans.get((record.spec.application, record.spec.name))
    if planned is None:
        return None
    goal, plan = planned
    if goal != goal_of(record):
        return status_pb2.DEPLOYMENT_STATUS_UPDATING, "applying the new goal"
    return plan.status, plan.message


def replica_infos(loop: Reconciler, application: str = "",
                  deployment: str = "") -> list[replica_pb2.ReplicaInfo]:
    infos = []
    for (app, name), views in sorted(loop.views.items()):
        if (application and app != application) or (deployment and name != deployment):
            continue
        for view in sorted(views.values(), key=lambda v: (v.slot, v.replica_id)):
            infos.append(replica_pb2.ReplicaInfo(
                record=loop.records[view.replica_id], state=view.state,
                message=view.failure or view.message))
    return infos
