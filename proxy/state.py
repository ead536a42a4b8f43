"""What a proxy knows: the route table and replica pools, from Watch snapshots."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from servefleet._private.dataplane.replica_sets import ReplicaSets
from servefleet._private.dataplane.router_loader import RouterLoader, allow_modules
from servefleet._private.dataplane.upstream import UpstreamPool
from servefleet._private.wire import ROUTES_KEY
from servefleet.v1 import watch_pb2

from .routes import RouteTable

logger = logging.getLogger("servefleet.proxy")


# How long after a proxy's start requests wait for its first route table
# (then 503): a proxy just started, or started while no controller leads.
FIRST_SYNC_WAIT_S = 10.0


class ProxyState:
    """Routes and replica pools, as the Watch stream last described them.

    Until the first route table and the replica sets of every deployment it
    routes to have come (`synced`), the proxy knows nothing: a request then
    waits for them (`wait_synced`) rather than being told 404 for a route
    that exists, and /-/healthz says not ready."""

    def __init__(self, upstream: UpstreamPool, passive_health: bool = True,
                 routers: RouterLoader | None = None) -> None:
        self.routes = RouteTable()
        # Without a loader of its own, a proxy loads servefleet's routers only.
        self.replica_sets = ReplicaSets(upstream, passive_health,
                                        routers or RouterLoader(allow_modules(())))
        self._routes_came = False
        self.synced = False
        self._synced_event: asyncio.Event | None = None
        # Requests wait for the first routes only this long after the start:
        # a proxy that never reaches a controller answers 503 at once after.
        self._wait_until = time.monotonic() + FIRST_SYNC_WAIT_S

    def apply(self, snapshot: watch_pb2.Snapshot) -> None:
        """Apply one snapshot; ValueError for a key that is no Watch key."""
        if snapshot.key == ROUTES_KEY:
            self.routes = RouteTable.from_snapshot(snapshot.routes)
            self._routes_came = True
            logger.info("routes: %s", self.routes.as_json())
        else:
            self.replica_sets.apply(snapshot)
        if not self.synced and self._routes_came and all(
                self.replica_sets.get(*key) is not None for key in self.routes.deployments()):
            self.synced = True
            if self._synced_event is not None:
                self._synced_event.set()

    async def wait_synced(self) -> bool:
        """Wait for the first routes and replica sets, until FIRST_SYNC_WAIT_S
        after the proxy started; whether they came."""
        if self.synced:
            return True
        if self._synced_event is None:
            self._synced_event = asyncio.Event()
        left = self._wait_until - time.monotonic()
        if left > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._synced_event.wait(), left)
        if not self.synced and self._routes_came:
            # Routes, but a deployment's replica set never came: serve with
            # what is known rather than hold every request.
            missing = [f"{a}/{d}" for a, d in self.routes.deployments()
                       if self.replica_sets.get(a, d) is None]
            logger.warning("no replica set came for %s; serving without", ", ".join(missing))
            self.synced = True
        return self.synced
