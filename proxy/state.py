"""What a proxy (or a handle router) knows: routes and replica pools, from Watch snapshots."""

from __future__ import annotations

import logging

from servefleet.dataplane.balancer import ReplicaPool
from servefleet.dataplane.upstream import UpstreamPool
from servefleet.v1 import watch_pb2
from servefleet.wire import REPLICAS_KIND, ROUTES_KEY, parse_watch_key

from .routes import RouteTable

logger = logging.getLogger("servefleet.proxy")


class ProxyState:
    """Routes and replica pools, as the Watch stream last described them."""

    def __init__(self, upstream: UpstreamPool) -> None:
        self.routes = RouteTable()
        self.pools: dict[tuple[str, str], ReplicaPool] = {}
        self._upstream = upstream

    def apply(self, snapshot: watch_pb2.Snapshot) -> None:
        """Apply one snapshot; ValueError for a key that is no Watch key."""
        kind, app, name = parse_watch_key(snapshot.key)
        if kind == ROUTES_KEY:
            self.routes = RouteTable.from_snapshot(snapshot.routes)
            logger.info("routes: %s", self.routes.as_json())
        elif kind == REPLICAS_KIND:
            pool = self.pools.get((app, name))
            before = {r.address for r in pool.replicas.values()} if pool else set()
            if snapshot.deleted:
                if pool is not None:
                    pool.close()
                self.pools.pop((app, name), None)
                after: set[str] = set()
            else:
                replicas = snapshot.replicas
                pool = self.pools.setdefault((app, name), ReplicaPool())
                pool.update([(e.replica_id, e.http_address) for e in replicas.endpoints],
                            replicas.max_ongoing_requests, replicas.max_queued_requests)
                after = {e.http_address for e in replicas.endpoints}
            for address in before - after:
                self._upstream.forget(address)  # gone: drop its idle connections
            if snapshot.deleted:
                return
            logger.info("%s/%s: %d replicas", app, name, len(replicas.endpoints))
