"""The replica pools of every deployment a proxy or handle router reaches.

Kept by `replicas/<app>/<deployment>` Watch snapshots: the controller's word
replaces the pool's replicas, limits and local guesses (replicas set aside);
a deleted set closes its pool, failing the requests queued on it. The idle
connections to a replica that left are closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from servefleet._private.wire import REPLICAS_KIND, parse_watch_key
from servefleet.v1 import watch_pb2

from .backpressure import Backpressure
from .balancer import ReplicaPool
from .grpc_forward import GrpcChannels
from .metrics import EJECTIONS, POOLS
from .router_loader import RouterLoader
from .upstream import UpstreamPool

logger = logging.getLogger(__name__)


class ReplicaSets:
    def __init__(self, upstream: UpstreamPool, passive_health: bool = True,
                 routers: RouterLoader | None = None) -> None:
        self.pools: dict[tuple[str, str], ReplicaPool] = {}
        # Makes the routers deployments name, under this process's allow rule.
        self.routers = routers or RouterLoader()
        self._passive_health = passive_health
        self._upstream = upstream
        # Given to each pool made from now on: see ReplicaPool.on_starved.
        self.on_starved: Callable[[], None] | None = None
        # The gRPC channels to replicas (a proxy with gRPC ingress), whose
        # connections to replicas that left are closed too.
        self.channels: GrpcChannels | None = None
        # The snapshot id of the set applied, by "application/deployment": what
        # load reports name, so the leader drains a replica once no caller routes to it.
        self.applied: dict[str, str] = {}
        # Called after a set is applied (the load reporter's wake).
        self.on_applied: Callable[[], None] | None = None
        POOLS.add(self)  # their queued and in-flight counts on /metrics

    def _addresses_held(self) -> tuple[set[str], set[str]]:
        """The HTTP and gRPC addresses of every pool's replicas now."""
        http: set[str] = set()
        grpc: set[str] = set()
        for pool in self.pools.values():
            for replica in pool.replicas.values():
                http.add(replica.address)
                if replica.grpc_address:
                    grpc.add(replica.grpc_address)
        return http, grpc

    def get(self, application: str, deployment: str) -> ReplicaPool | None:
        """The deployment's pool; None while no snapshot has named it."""
        return self.pools.get((application, deployment))

    def apply(self, snapshot: watch_pb2.Snapshot) -> None:
        """Apply one replica-set snapshot; other keys are ignored, and a key that
        is no Watch key raises ValueError."""
        kind, app, name = parse_watch_key(snapshot.key)
        if kind != REPLICAS_KIND or not name:
            return
        pool = self.pools.get((app, name))
        before = {r.address for r in pool.replicas.values()} if pool else set()
        grpc_before = {r.grpc_address for r in pool.replicas.values()
                       if r.grpc_address} if pool else set()
        if snapshot.deleted:
            if pool is not None:
                pool.close()
            self.pools.pop((app, name), None)
            after: set[str] = set()
            grpc_after: set[str] = set()
        else:
            replicas = snapshot.replicas
            pool = self.pools.get((app, name))
            if pool is None:
                ejections = EJECTIONS.labels(app, name)
                pool = self.pools[(app, name)] = ReplicaPool(
                    on_starved=self.on_starved, key=(app, name),
                    on_eject=lambda _replica: ejections.inc(),
                    passive_health=self._passive_health)
            pool.update([(e.replica_id, e.http_address) for e in replicas.endpoints],
                        replicas.max_ongoing_requests, replicas.max_queued_requests,
                        {e.replica_id: e.grpc_address for e in replicas.endpoints
                         if e.grpc_address}, replicas.retry_methods,
                        {e.replica_id: e.cleared for e in replicas.endpoints},
                        replicas.unavailable)
            pool.backpressure = Backpressure.of(replicas)
            spec = (replicas.request_router, replicas.request_router_kwargs_json)
            if spec != pool.router_spec:
                pool.use_router(self.routers.make(*spec, where=f"{app}/{name}"), spec)
            after = {e.http_address for e in replicas.endpoints}
            for e in replicas.endpoints:
                self._upstream.serves_tls(e.http_address, e.http_tls)
            pool.serves_tls = any(e.http_tls for e in replicas.endpoints)
            grpc_after = {e.grpc_address for e in replicas.endpoints if e.grpc_address}
        # Gone from this deployment and from every other (a resync may move an
        # address between deployments): drop its connections and TLS note.
        left, grpc_left = before - after, grpc_before - grpc_after
        held = self._addresses_held() if left or grpc_left else (set(), set())
        for address in left - held[0]:
            self._upstream.forget(address)  # gone: drop its idle connections
        if self.channels is not None:
            for e in [] if snapshot.deleted else snapshot.replicas.endpoints:
                if e.grpc_address:  # the gRPC port serves TLS as the HTTP port does
                    self.channels.serves_tls(e.grpc_address, e.http_tls)
            for address in grpc_left - held[1]:
                self.channels.forget(address)
        if snapshot.deleted:
            self.applied.pop(f"{app}/{name}", None)
        else:
            self.applied[f"{app}/{name}"] = snapshot.snapshot_id
            logger.info("%s/%s: %d replicas", app, name, len(snapshot.replicas.endpoints))
        if self.on_applied is not None:
            self.on_applied()
