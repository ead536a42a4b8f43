"""What HAProxy should do, decided from what the proxy knows (pure).

Each route is served by HAProxy itself when HAProxy can give it servefleet's
semantics, and otherwise by the Python proxy that runs behind HAProxy in
the same process (it has every feature). The Python path takes:

- a route whose application cannot serve (it answers 503 with the reason);
- a route whose application wants a bearer token (the token table is the
  Python proxy's, reread on SIGHUP);
- a route with shadow traffic (HAProxy cannot copy a request);
- a route to a deployment with a request router other than power of two
  choices (a user's class, prefix affinity), whose replicas serve TLS (the
  cluster's certificates: hop_tls.py), or whose replica set has not come yet;
- at request time: a request for a multiplexed model (the model-aware
  choice needs the models each replica said it holds), a request to a
  deployment with no replica up (scaled to zero: the Python proxy queues it
  and wakes the autoscaler, as it always does), the admin paths and any
  path no route matches (404 naming the prefixes).

Everything else (the bulk of the traffic) goes from HAProxy to the replicas.
A route's traffic split is HAProxy's too: one random draw per request,
cumulative thresholds out of SPLIT_SCALE.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from servefleet._private.dataplane.backpressure import Backpressure
from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.dataplane.router_names import POWER_OF_TWO

from ..routes import RouteTable, Target

PYTHON_BACKEND = "python_path"
SPLIT_SCALE = 10000
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _safe(text: str, limit: int = 48) -> str:
    """`text` as an HAProxy name part: kept when it is safe, else cleaned and
    made unique by a digest of the original."""
    cleaned = _UNSAFE.sub("_", text)[:limit]
    if cleaned == text:
        return text
    return f"{cleaned}~{hashlib.sha256(text.encode()).hexdigest()[:8]}".replace("~", "_")


def backend_name(application: str, deployment: str) -> str:
    return f"d.{_safe(application)}.{_safe(deployment)}"


def server_name(replica_id: str, address: str) -> str:
    """One name per (replica, address): a replica that moved is another server."""
    return f"{_safe(replica_id)}.{hashlib.sha256(address.encode()).hexdigest()[:6]}"


@dataclass(frozen=True)
class Backend:
    name: str
    application: str
    deployment: str
    # Past this many queued requests, the backpressure answer (-1: no limit).
    max_queued: int
    # That answer's status and Retry-After (the deployment's backpressure_config).
    backpressure: Backpressure = field(default_factory=Backpressure)


@dataclass(frozen=True)
class Route:
    prefix: str
    # (backend, cumulative threshold out of SPLIT_SCALE): the draw below the
    # first threshold goes to the first backend. Empty: the Python path.
    backends: tuple[tuple[str, int], ...]
    # Why the Python path serves it ("" when HAProxy does).
    python_because: str = ""


@dataclass(frozen=True)
class Layout:
    """Everything of HAProxy's configuration but its servers: a change here
    means a reload, a change of servers only runtime API commands."""

    routes: tuple[Route, ...]  # longest prefix first
    backends: tuple[Backend, ...]
    # HAProxy's server timeout: 504 when a replica's answer does not begin
    # (or pauses) this long.
    timeout_s: float
    max_body_bytes: int
    # This proxy's hop pass, which every request to a replica carries in a
    # cluster with credentials (hop_client.py); "" in one without.
    hop_pass: str = ""


@dataclass(frozen=True)
class Server:
    replica_id: str
    address: str  # host:port as the replica set says
    maxconn: int


def _python_because(target: Target, pools: Mapping[tuple[str, str], ReplicaPool]) -> str:
    if not target.deployment or target.unavailable:
        return "the application cannot serve"
    if target.require_token:
        return "the application wants a token"
    if target.shadow_of is not None:
        return "shadow traffic"
    for name in [target.deployment, *(n for n, _ in target.split)]:
        pool = pools.get((target.application, name))
        if pool is None:
            return f"no replica set for {name} yet"
        if pool.unavailable:
            return f"{name} cannot serve"
        if pool.router_spec[0] not in ("", POWER_OF_TWO):
            return f"{name} routes with {pool.router_spec[0]}"
        if pool.serves_tls:
            return f"{name}'s replicas serve TLS"
    return ""


def decide(table: RouteTable, pools: Mapping[tuple[str, str], ReplicaPool],
           timeout_s: float) -> Layout:
    """The layout for `table` and the replica pools the proxy holds."""
    routes: list[Route] = []
    backends: dict[str, Backend] = {}
    for target in table.routes:  # longest prefix first
        because = _python_because(target, pools)
        if because:
            routes.append(Route(target.route_prefix, (), because))
            continue
        split = target.split or ((target.deployment, 1.0),)
        total = sum(weight for _, weight in split)
        chosen: list[tuple[str, int]] = []
        running = 0.0
        for name, weight in split:
            pool = pools[(target.application, name)]
            backend = backends.setdefault(
                backend_name(target.application, name),
                Backend(backend_name(target.application, name), target.application, name,
                        pool.max_queued, pool.backpressure))
            running += weight
            chosen.append((backend.name, round(SPLIT_SCALE * running / total)))
        routes.append(Route(target.route_prefix, tuple(chosen)))
    return Layout(tuple(routes), tuple(sorted(backends.values(), key=lambda b: b.name)),
                  timeout_s, table.max_request_body_bytes)


def servers(layout: Layout, pools: Mapping[tuple[str, str], ReplicaPool]
            ) -> dict[str, dict[str, Server]]:
    """Each backend's servers by name: every replica its pool lists."""
    wanted: dict[str, dict[str, Server]] = {}
    for backend in layout.backends:
        pool = pools.get((backend.application, backend.deployment))
        wanted[backend.name] = {} if pool is None else {
            server_name(r.replica_id, r.address): Server(r.replica_id, r.address,
                                                         pool.max_ongoing)
            for r in pool.replicas.values()}
    return wanted
