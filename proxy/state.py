"""What a proxy knows: the route table and replica pools, from Watch snapshots."""

from __future__ import annotations

import logging

from servefleet._private.dataplane.replica_sets import ReplicaSets
from servefleet._private.dataplane.routers import RouterLoader, allow_modules
from servefleet._private.dataplane.upstream import UpstreamPool
from servefleet._private.wire import ROUTES_KEY
from servefleet.v1 import watch_pb2

from .routes import RouteTable

logger = logging.getLogger("servefleet.proxy")


class ProxyState:
    """Routes and replica pools, as the Watch stream last described them."""

    def __init__(self, upstream: UpstreamPool, passive_health: bool = True,
                 routers: RouterLoader | None = None) -> None:
        self.routes = RouteTable()
        # Without a loader of its own, a proxy loads servefleet's routers only.
        self.replica_sets = ReplicaSets(upstream, passive_health,
                                        routers or RouterLoader(allow_modules(())))

    def apply(self, snapshot: watch_pb2.Snapshot) -> None:
        """Apply one snapshot; ValueError for a key that is no Watch key."""
        if snapshot.key == ROUTES_KEY:
            self.routes = RouteTable.from_snapshot(snapshot.routes)
            logger.info("routes: %s", self.routes.as_json())
        else:
            self.replica_sets.apply(snapshot)
