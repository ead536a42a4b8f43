"""Request routers: which replica of a deployment takes a request.

A deployment names its router (ReplicaConfig.request_router): the default,
power of two choices over in-flight counts (inline in balancer.py, where it
costs nothing extra), `prefix_affinity` (prefix_affinity.py), or a user's
`RequestRouter` subclass as "module:Class" with JSON kwargs. The pool
(balancer.py) asks a router only among the candidates: replicas with room,
not ejected nor marked down. It builds the router's views (`ReplicaInfo`,
`RequestInfo`) only when the deployment has a router other than the default.
A request for a multiplexed model asks the router too (it sees the model id
and each replica's models); `place_model` is the default's choice for it,
which a router's None falls back to.

Where a router's class is loaded is the caller's choice (`RouterLoader`,
router_loader.py):
handles, inside replicas, load any; a proxy loads servefleet's own and
classes of the modules its operator allows (--allow-router-module), never
what a deploy alone names (a deploy right is not a right to run code in the
proxy). A router that cannot be loaded, returns nothing usable or raises is
logged once and the pool routes by power of two.
"""

from __future__ import annotations

import hashlib
import logging
import random
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReplicaInfo:
    """A candidate replica as a router sees it: its id, the requests this
    router's process has in flight there, its limit, and the multiplexed
    models it said it holds."""

    replica_id: str
    in_flight: int
    max_ongoing: int
    models: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RequestInfo:
    """What a router knows of a request: its multiplexed model id and its
    routing key ("" when none was given: the HTTP header
    x-servefleet-routing-key, `handle.options(routing_key=...)`, the gRPC
    metadata key of the same name), and for HTTP the method and path."""

    model_id: str = ""
    routing_key: str = ""
    method: str = ""
    path: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


class _Slot(Protocol):
    """What model placement reads of a replica (the pool's or a router's view)."""

    @property
    def replica_id(self) -> str: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def models(self) -> frozenset[str]: ...


S = TypeVar("S", bound=_Slot)


def _rank(model_id: str, replica_id: str) -> bytes:
    """Rendezvous hashing: every router orders a model's replicas the same way."""
    return hashlib.blake2b(f"{model_id}\0{replica_id}".encode(), digest_size=8).digest()


def place_model(candidates: Sequence[S], model_id: str) -> S:
    """Where a multiplexed model's request goes (multiplex.py): a replica
    holding the model, the least loaded of them; else, among those with
    room, one holding the fewest models (it has space, or evicts least),
    ties broken by the model's rendezvous order, the same for every router.
    A hot model's holders fill up, and it spreads to the next."""
    holders = [r for r in candidates if model_id in r.models]
    if holders:
        return min(holders, key=lambda r: r.in_flight)
    return min(candidates, key=lambda r: (len(r.models), _rank(model_id, r.replica_id)))


class RequestRouter:
    """Base of request routers. Subclass it, take your settings as keyword
    arguments (the deployment's request_router_kwargs), and choose:

        class Lowest(RequestRouter):
            def choose(self, replicas, request):
                return min(replicas, key=lambda r: r.replica_id)

    `choose` gets the candidates (never empty) and returns one of them, or
    None to leave the choice to power of two choices. It runs on the
    proxy's or caller's event loop for every request: keep it quick and
    never block. `replicas_changed` is called with the deployment's replica
    ids whenever they change (drop state kept for replicas that left)."""

    def __init__(self, **kwargs: Any) -> None:
        if kwargs:
            raise TypeError(f"{type(self).__name__} takes no settings, got {sorted(kwargs)}")

    def choose(self, replicas: Sequence[ReplicaInfo],
               request: RequestInfo) -> ReplicaInfo | None:
        raise NotImplementedError

    def replicas_changed(self, replica_ids: Iterable[str]) -> None:
        """The deployment's replicas now (by default, nothing kept to drop)."""


class PowerOfTwoChoices(RequestRouter):
    """Two candidates at random, the one with fewer requests in flight (the
    default, as Ray Serve's); a multiplexed model's request by `place_model`.
    The pool runs it inline; this class is for routers that fall back to it."""

    def choose(self, replicas: Sequence[ReplicaInfo],
               request: RequestInfo) -> ReplicaInfo | None:
        if request.model_id:
            return place_model(replicas, request.model_id)
        if len(replicas) == 1:
            return replicas[0]
        a, b = random.sample(list(replicas), 2)
        return a if a.in_flight <= b.in_flight else b


def choose_safely(router: RequestRouter, replicas: Sequence[ReplicaInfo],
                  request: RequestInfo, where: str,
                  call: Callable[[RequestRouter], Any] | None = None) -> ReplicaInfo | None:
    """The router's choice (or `call`'s result); None when it raises or
    chooses no candidate (logged once per router: the pool then routes that
    request by power of two choices)."""
    try:
        if call is not None:
            return call(router)
        chosen = router.choose(replicas, request)
        if chosen is not None and all(getattr(chosen, "replica_id", None) != r.replica_id
                                      for r in replicas):
            raise ValueError(f"it chose {chosen!r}, which is not one of the candidates")
        return chosen
    except Exception as e:
        if router not in _FAILED:
            _FAILED.add(router)
            logger.error("%s: request router %s failed (%s: %s); power of two choices for "
                         "the requests it fails", where, type(router).__name__,
                         type(e).__name__, e)
        return None


_FAILED: weakref.WeakSet[RequestRouter] = weakref.WeakSet()
