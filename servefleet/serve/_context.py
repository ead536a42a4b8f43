"""`serve.get_replica_context()`: who is running this code, in Ray's shape.

In a replica the answer comes from servefleet._private.replica_context (set by the
replica at start; its rank and world size as the controller last said).
In local testing mode (local_testing.py) every deployment runs in the
calling process, so the answer is per call: the
context variable `LOCAL_REPLICA` is set while a local deployment's code
runs (its constructor, its methods) and read first here.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from servefleet._private import replica_context

from .exceptions import RayServeException
from .schema import ReplicaRank

__all__ = ["DeploymentID", "ReplicaContext", "ReplicaID", "get_replica_context"]


@dataclass(frozen=True)
class DeploymentID:
    name: str
    app_name: str = "default"

    def __str__(self) -> str:
        return f"Deployment(name='{self.name}', app='{self.app_name}')"


@dataclass(frozen=True)
class ReplicaID:
    unique_id: str
    deployment_id: DeploymentID

    def to_full_id_str(self) -> str:
        return f"{self.deployment_id.app_name}#{self.deployment_id.name}#{self.unique_id}"

    def __str__(self) -> str:
        return (f"Replica(id='{self.unique_id}', deployment='{self.deployment_id.name}', "
                f"app='{self.deployment_id.app_name}')")


@dataclass
class ReplicaContext:
    """Ray's ReplicaContext: the replica's id, the user's object it runs
    (the instance of the deployment's class, or its function), its rank
    among its deployment's replicas and their target count (world_size).
    Each `get_replica_context()` call answers with the rank in force then."""

    replica_id: ReplicaID
    servable_object: Any
    rank: ReplicaRank | None = None
    world_size: int = 0

    @property
    def app_name(self) -> str:
        return self.replica_id.deployment_id.app_name

    @property
    def deployment(self) -> str:
        return self.replica_id.deployment_id.name

    @property
    def replica_tag(self) -> str:
        return self.replica_id.unique_id


# Set while a local-testing-mode deployment's code runs.
LOCAL_REPLICA: contextvars.ContextVar[ReplicaContext | None] = contextvars.ContextVar(
    "local_testing_replica", default=None)


def current_app_name() -> str | None:
    """The application of the replica running this code, or None outside one."""
    local = LOCAL_REPLICA.get()
    if local is not None:
        return local.app_name
    identity = replica_context.current()
    return identity.application if identity is not None else None


def get_replica_context() -> ReplicaContext:
    """The running replica's context; RayServeException outside a deployment's
    code (as Ray's)."""
    context = internal_replica_context()
    if context is None:
        raise RayServeException("serve.get_replica_context() may only be called from within "
                                "a deployment's code (a replica, or local testing mode)")
    return context


def internal_replica_context() -> ReplicaContext | None:
    """The running replica's context, None outside one (Ray's
    `ray.serve.context._get_internal_replica_context`)."""
    local = LOCAL_REPLICA.get()
    if local is not None:
        return local
    identity = replica_context.current()
    if identity is None:
        return None
    servable = identity.servable[0] if identity.servable else None
    deployment = DeploymentID(identity.deployment, identity.application)
    placement = identity.placement
    rank = ReplicaRank(placement.rank) if placement.rank is not None else None
    return ReplicaContext(ReplicaID(identity.replica_id, deployment), servable, rank,
                         placement.world_size)
