"""`servefleet.serve.context`: Ray Serve's `ray.serve.context`, the part its
users' code reaches for: `ReplicaContext` and `_get_internal_replica_context()`
(the running replica's context, or None outside a replica, where
`serve.get_replica_context()` raises). Request routers and libraries written
for Ray call it to learn which replica they run in."""

from ._context import DeploymentID, ReplicaContext, ReplicaID, internal_replica_context

__all__ = ["DeploymentID", "ReplicaContext", "ReplicaID", "_get_internal_replica_context"]


def _get_internal_replica_context() -> ReplicaContext | None:
    """The running replica's context (its id, servable object, rank and world
    size), or None when this code does not run in a replica."""
    return internal_replica_context()
