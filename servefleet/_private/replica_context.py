"""Who this process serves as, when it is a replica: set once by the replica
at start (replica/replica.py), read by user code's helpers.

`current()` is None outside replicas. Handles made inside a replica
(`get_deployment_handle` without controllers) call this replica's own
controllers, and `servefleet.serve.get_replica_context()` answers from it.
Its `placement` (rank and world size) changes while the replica runs: the
controller assigns ranks (controller/reconcile/ranks.py) and sends changes
with Reconfigure. `ReplicaRank` is how Ray names a rank to user code
(`servefleet.serve.schema` re-exports it; it lives here so that replicas and
ray_reconfigure.py need not import the Ray-compatibility layer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ReplicaRank:
    """A replica's rank in its deployment (Ray's ReplicaRank): `rank` is
    0..n-1 among the deployment's replicas. servefleet has no notion of
    nodes shared by replicas: every replica counts as on one node, so
    `node_rank` is 0 and `local_rank` equals `rank`."""

    rank: int
    node_rank: int = 0
    local_rank: int = -1

    def __post_init__(self) -> None:
        if self.local_rank == -1:
            object.__setattr__(self, "local_rank", self.rank)


@dataclass
class Placement:
    """The replica's rank among its deployment's replicas (None: not given
    one, as outside a cluster), and their target count."""

    rank: int | None = None
    world_size: int = 0


@dataclass(frozen=True)
class ReplicaIdentity:
    cluster: str
    application: str
    deployment: str
    replica_id: str
    # The controllers the replica follows (handles made here call them).
    controllers: tuple[str, ...] = ()
    # The user's object once loaded (the instance of the class, or the function).
    servable: list[Any] = field(default_factory=list, compare=False)
    placement: Placement = field(default_factory=Placement, compare=False)


_current: ReplicaIdentity | None = None


def set_current(identity: ReplicaIdentity) -> None:
    global _current
    _current = identity


def current() -> ReplicaIdentity | None:
    return _current


def clear() -> None:
    """Forget the identity (for tests that build replicas in their own process)."""
    global _current
    _current = None
