"""What the replica reconciler observed and planned, published after each pass.

`ObservedState` is immutable: the reconciler builds a new one at the end of
a pass (reusing the entries of deployments that did not change) and swaps it
in. GetStatus, ListReplicas, the Watch publisher's replica sets and Shutdown
read only this, never the reconciler's working state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from servefleet.v1 import records_pb2, replica_pb2, status_pb2

from .planner import RECOVERING, RUNNING, Goal, ReplicaView

DKey = tuple[str, str]
# What the planner last said of a deployment: for which goal, its status and
# message, and the error of its last start when no replica serves (Plan.start_error).
Planned = tuple[Goal | None, status_pb2.DeploymentStatus, str, str]


def state_word(state: replica_pb2.ReplicaState) -> str:
    return replica_pb2.ReplicaState.Name(state).removeprefix("REPLICA_STATE_")


@dataclass(frozen=True, slots=True)
class ReplicaObservation:
    record: replica_pb2.ReplicaRecord
    view: ReplicaView

    @property
    def serving(self) -> bool:
        """May take traffic: RUNNING, or RECOVERING (found after a failover and
        serving until a probe says otherwise, so proxies keep their sets)."""
        return self.view.state in (RUNNING, RECOVERING) and not self.view.failure


@dataclass(frozen=True, slots=True)
class DeploymentObservation:
    goal: Goal | None
    status: status_pb2.DeploymentStatus
    message: str
    replicas: tuple[ReplicaObservation, ...]  # by slot, then id
    start_error: str = ""

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for replica in self.replicas:
            word = state_word(replica.view.state)
            counts[word] = counts.get(word, 0) + 1
        return counts


@dataclass(frozen=True, slots=True)
class ObservedState:
    deployments: Mapping[DKey, DeploymentObservation] = field(
        default_factory=lambda: MappingProxyType({}))

    def updated(self, keys: Iterable[DKey], views: Mapping[DKey, Mapping[str, ReplicaView]],
                plans: Mapping[DKey, Planned],
                records: Mapping[str, replica_pb2.ReplicaRecord]) -> ObservedState:
        """A new state with the entries of `keys` rebuilt from the reconciler's
        views, plans and records; every other entry is shared with this one."""
        deployments = dict(self.deployments)
        for key in keys:
            replicas, planned = views.get(key), plans.get(key)
            if not replicas and planned is None:
                deployments.pop(key, None)
                continue
            goal, status, message, start_error = planned or (
                None, status_pb2.DEPLOYMENT_STATUS_UPDATING, "", "")
            ordered = sorted((replicas or {}).values(), key=lambda v: (v.slot, v.replica_id))
            deployments[key] = DeploymentObservation(goal, status, message, tuple(
                ReplicaObservation(records[v.replica_id], v) for v in ordered), start_error)
        return ObservedState(MappingProxyType(deployments))

    def tracks(self, key: DKey) -> bool:
        """Whether replicas of `key` are still tracked (running or stopping)."""
        observed = self.deployments.get(key)
        return observed is not None and bool(observed.replicas)

    def empty(self) -> bool:
        return not any(d.replicas for d in self.deployments.values())

    def serving(self, application: str, deployment: str) -> list[ReplicaObservation]:
        """The replicas that may take traffic."""
        observed = self.deployments.get((application, deployment))
        return [r for r in observed.replicas if r.serving] if observed else []

    def counts(self, key: DKey) -> dict[str, int]:
        observed = self.deployments.get(key)
        return observed.counts() if observed else {}

    def planned_status(self, record: records_pb2.DeploymentRecord,
                       goal: Goal) -> tuple[status_pb2.DeploymentStatus, str] | None:
        """(status, message) of the last plan, or None if none was made yet.

        A plan made for an older goal than `goal` (the record's) says nothing
        about the new one: the deployment is then updating until planned.
        """
        observed = self.deployments.get((record.spec.application, record.spec.name))
        if observed is None:
            return None
        if observed.goal != goal:
            return status_pb2.DEPLOYMENT_STATUS_UPDATING, "applying the new goal"
        return observed.status, observed.message

    def start_error(self, record: records_pb2.DeploymentRecord, goal: Goal) -> str:
        """The error of the last start of `goal` (the record's) when it failed
        and no replica serves; "" otherwise, and before the goal was planned."""
        observed = self.deployments.get((record.spec.application, record.spec.name))
        if observed is None or observed.goal != goal:
            return ""
        return observed.start_error

    def replica_infos(self, application: str = "",
                      deployment: str = "") -> list[replica_pb2.ReplicaInfo]:
        infos: list[replica_pb2.ReplicaInfo] = []
        for (app, name), observed in sorted(self.deployments.items()):
            if (application and app != application) or (deployment and name != deployment):
                continue
            infos.extend(replica_pb2.ReplicaInfo(record=r.record, state=r.view.state,
                                                 message=r.view.failure or r.view.message)
                         for r in observed.replicas)
        return infos
