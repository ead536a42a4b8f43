"""Which ServeApplication owns which application, and what a pass does about it.

Ownership is recorded in servefleet's own store, one record per application
that a ServeApplication applied (owners.py): the object's namespace, name
and uid. The record is written before the application's first deploy and
removed after its deletion, so it outlives anything Kubernetes forgets: an
object deleted while no controller leads is still found missing by the
next leader, and its application deleted. The rules, one pass at a time:

1. A valid object claims the application its spec names (`spec.name`,
   default the object's name). An object whose spec is refused claims the
   applications whose records carry its uid: they are kept as they are
   (an invalid spec changes nothing).
2. Of several objects claiming one application, the one its record names
   keeps it; without one, the oldest object (then the first by name). The
   others are in CONFLICT.
3. An application that exists with no record was deployed by other means
   (servefleet deploy, the SDK, the REST API): ServeApplications leave it
   alone, and the objects claiming it are in CONFLICT. So is an
   application whose record names another namespace (another controller's
   view, or an earlier --kube-namespace): left alone.
4. The owner's application is deployed (DeployApplications with `partial`,
   the record first when it changes) when the object's generation, the
   owner, or the application record's generation differs from what this
   term last applied: a spec edited, the application deleted or replaced
   by other means (it is put back: the object is the source of truth).
5. An application whose record is of this namespace and that no object
   claims is deleted, then its record.

`plan` is a pure function of the objects, the records, the live
applications and what was applied; the reconciler carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .objects import ServeApp


@dataclass(frozen=True)
class Owner:
    """The ServeApplication an application was applied from."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Applied:
    """What this term last did for an application: the owner's uid and the
    generation of the object, and the application record's generation after
    it (0: none, the deploy was refused before anything was stored)."""

    uid: str
    generation: int
    record_generation: int


@dataclass(frozen=True)
class Deploy:
    application: str
    obj: ServeApp
    owner: Owner  # recorded first when the stored record differs


@dataclass(frozen=True)
class Release:
    """Delete the application (when it is live), then its ownership record."""

    application: str
    live: bool


@dataclass
class Plan:
    deploy: dict[str, Deploy] = field(default_factory=dict)
    release: dict[str, Release] = field(default_factory=dict)
    # By object name: the application it holds (owns, or keeps while invalid).
    holds: dict[str, str] = field(default_factory=dict)
    # By object name: why it holds none although its spec is valid.
    conflicts: dict[str, str] = field(default_factory=dict)


def plan(namespace: str, objects: list[ServeApp], owners: dict[str, Owner],
         live: dict[str, int], applied: dict[str, Applied]) -> Plan:
    """What to deploy, release and say, from the objects of `namespace`, the
    ownership records, the live applications (name -> record generation)
    and what this term applied."""
    out = Plan()
    claims: dict[str, list[ServeApp]] = {}
    for obj in objects:
        if obj.spec is not None:
            claims.setdefault(obj.application, []).append(obj)
        else:  # rule 1: a refused spec keeps what its object owns
            for app, record in owners.items():
                if record.namespace == namespace and record.uid == obj.uid:
                    claims.setdefault(app, []).append(obj)
    for app, claimants in sorted(claims.items()):
        owner = owners.get(app)
        if owner is not None and owner.namespace != namespace:
            for obj in claimants:
                out.conflicts[obj.name] = (
                    f"application {app} belongs to ServeApplication {owner.name} of namespace "
                    f"{owner.namespace}: left alone; name another one in spec.name")
            continue
        current = next((o for o in claimants if owner is not None and o.uid == owner.uid),
                       None)
        winner = current or min(claimants, key=lambda o: (o.created, o.name))
        for obj in claimants:
            if obj is not winner and obj.spec is not None:
                out.conflicts[obj.name] = (f"application {app} belongs to ServeApplication "
                                           f"{winner.name}; name another one in spec.name")
        if owner is None and app in live:
            for obj in claimants:
                out.conflicts[obj.name] = (
                    f"application {app} was deployed by other means (servefleet deploy, the "
                    "SDK, the REST API) and is left alone: delete it there, or name another "
                    "one in spec.name")
            continue
        out.holds[winner.name] = app
        if winner.spec is None:
            continue  # invalid: nothing changes
        new_owner = Owner(namespace, winner.name, winner.uid)
        done = Applied(winner.uid, winner.generation, live.get(app, 0))
        if owner != new_owner or applied.get(app) != done:
            out.deploy[app] = Deploy(app, winner, new_owner)
    for app, recorded in sorted(owners.items()):
        if recorded.namespace == namespace and app not in claims:
            out.release[app] = Release(app, app in live)
    return out
