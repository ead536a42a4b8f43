"""Retiring an old version's deployment-scoped actors once its replicas are gone.

Ray Serve keys a deployment's actors by its code version: a rollout starts
new actors for the new version, and the old version's actors live on while
any replica of that version (running or draining) may still call them. In
servefleet each actor is a hidden deployment of one replica whose name ends
in the version (servefleet/_private/ray_actors.py), and which names its
deployment, the parent, in its environment (actor_env.ACTOR_OF_ENV). A new
version's graph no longer names the old actors; applying it leaves them
alone when their parent stays (goals/deployments.py), and this reconciler
(a step of the loop: loop.py) deletes each such actor once `retired` says so:

- an actor the parent's current goal names (actor_env.ACTORS_ENV) stays,
  and so does one made after that goal was written (a local run deploys a
  new version's actors just before the deployment itself);
- any other stays while the parent has a replica of another version than
  its goal's (the rollout is under way, or its old replicas drain), and
  goes once every replica left is of the goal's version;
- the actor of a deleted parent goes once the parent has no replica left
  (if it was made before the deletion); one whose parent is not there yet
  stays (a local run deploys the actors of a new deployment first).

The replicas counted are those the replica reconciler tracks (observed
state, rebuilt from the registry before a new term's first pass), so a
failover neither retires actors early nor forgets them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from servefleet._private.actor_env import actors_of, parent_of
from servefleet.v1 import records_pb2, replica_pb2

from ..goals.deployments import DeploymentTable
from .loop import ReconcileLoop
from .observed import DeploymentObservation

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (application, deployment)


def retired(actor: records_pb2.DeploymentRecord, parent: records_pb2.DeploymentRecord | None,
            parent_replicas: Iterable[replica_pb2.ReplicaRecord]) -> bool:
    """Whether the live actor deployment `actor` is to be deleted now, given
    its parent's record (live or deleted; None if there is none) and the
    parent's replicas."""
    if parent is None:
        return False
    if parent.deleted:
        return (actor.start_time.ToNanoseconds() < parent.end_time.ToNanoseconds()
                and not any(True for _ in parent_replicas))
    if actor.spec.name in actors_of(parent.spec.runtime.env).values():
        return False
    if actor.start_time.ToNanoseconds() >= parent.update_time.ToNanoseconds():
        return False  # newer than the goal: the next goal's, about to be written
    return all((r.version, r.code_hash) == (parent.version, parent.code_hash)
               for r in parent_replicas)


class ActorRetirement:
    """The loop's step that deletes retired actor deployments (`retired`)."""

    name = "actor-retirement"

    def __init__(self, deployments: DeploymentTable, loop: ReconcileLoop,
                 observed: Callable[[Key], DeploymentObservation | None]) -> None:
        self._deployments, self._loop, self._observed = deployments, loop, observed
        self._records: dict[Key, records_pb2.DeploymentRecord] = {}

    def _decide(self, key: Key) -> bool:
        """Whether `key`, an actor deployment, is retired, by the records of
        this pass and the replicas observed now."""
        actor = self._records.get(key)
        if actor is None or actor.deleted:
            return False
        parent = (key[0], parent_of(actor.spec.runtime.env))
        observed = self._observed(parent)
        replicas = [r.record for r in observed.replicas] if observed is not None else []
        return retired(actor, self._records.get(parent), replicas)

    async def begin_pass(self, now: float) -> None:
        self._records = {(r.spec.application, r.spec.name): r
                         for r in self._deployments.list(include_deleted=True)}

    def keys(self) -> Iterable[Key]:
        return [key for key, r in self._records.items()
                if not r.deleted and parent_of(r.spec.runtime.env)]

    def reconcile(self, key: Key, now: float) -> None:
        application, name = key
        if not self._decide(key):
            return

        async def work() -> None:
            # Checked again on the tables as they are now: a deploy since the
            # pass began may have named the actor again.
            await self.begin_pass(0.0)
            if not self._decide(key):
                return
            if await self._deployments.delete(application, [name]):
                logger.info("application %s: deleted %s, an actor of an older version of %s "
                            "that no replica runs any more", application, name,
                            parent_of(self._records[key].spec.runtime.env))

        self._loop.spawn(("retire-actor", application, name), work)

    def end_pass(self, now: float) -> None:
        pass
