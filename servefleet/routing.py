"""Request routers: how proxies and handles choose a deployment's replica.

A deployment names its router with the `request_router` option (and
`request_router_kwargs`): "power_of_two" (the default), "prefix_affinity",
or a subclass of `RequestRouter` as "module:Class":

    from servefleet.routing import RequestRouter

    class LeastLoaded(RequestRouter):
        def choose(self, replicas, request):
            return min(replicas, key=lambda r: r.in_flight)

    @servefleet.deployment(request_router="my_routers:LeastLoaded")

`choose` gets the candidate replicas (`ReplicaInfo`: id, requests in flight,
limit, models held; never empty) and the request (`RequestInfo`: multiplexed
model id, routing key, and for HTTP method, path and headers) and returns a
candidate, or None for power of two choices. The routing key comes from the
HTTP header `x-servefleet-routing-key`, `handle.options(routing_key=...)` or
the gRPC metadata key of the same name. Proxies load a user's class only
from modules their operator allows (`servefleet proxy
--allow-router-module`); handles load it in the calling replica.
docs/routing.md says more.
"""

from servefleet._private.dataplane.prefix_affinity import PrefixAffinity
from servefleet._private.dataplane.routers import (
    PowerOfTwoChoices,
    ReplicaInfo,
    RequestInfo,
    RequestRouter,
)

__all__ = ["PowerOfTwoChoices", "PrefixAffinity", "ReplicaInfo", "RequestInfo",
           "RequestRouter"]
