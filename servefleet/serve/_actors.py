"""`serve.get_deployment_actor(actor_name)`: the handle of one of this
replica's deployment-scoped actors (servefleet/_private/ray_actors.py: each
is a hidden deployment of one replica). Call its methods as Ray's actor
handle's: `await actor.method.remote(...)` (or `.result()` from plain `def`
code). In local testing mode the actor runs in this process
(_local_testing.py)."""

from __future__ import annotations

from typing import Any

from servefleet._private.ray_actors import actors_here

from ._context import LOCAL_REPLICA, internal_replica_context
from ._local_handle import ACTORS, LocalDeploymentHandle
from .exceptions import RayServeException


def get_deployment_actor(actor_name: str) -> Any:
    """A handle to the deployment-scoped actor `actor_name` of the running
    replica's deployment (in local testing mode, to the actor running in
    this process). RayServeException outside a replica; ValueError when the
    deployment has no actor of that name, naming those it has."""
    from ._api import get_deployment_handle

    context = internal_replica_context()
    if context is None:
        raise RayServeException("serve.get_deployment_actor() works only in a running "
                                "replica: call it from a deployment's constructor or methods")
    local = LOCAL_REPLICA.get() is not None
    actors = ACTORS.get((context.app_name, context.deployment), {}) if local else actors_here()
    deployment = actors.get(actor_name)
    if deployment is None:
        have = ", ".join(repr(n) for n in sorted(actors)) or "none"
        raise ValueError(f"deployment {context.deployment!r} has no deployment-scoped actor "
                         f"named {actor_name!r} (its deployment_actors: {have})")
    if local:
        return LocalDeploymentHandle(context.app_name, deployment)
    return get_deployment_handle(deployment, context.app_name)
