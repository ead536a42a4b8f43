"""The edge's limits on every port a replica opens: HTTP (requests, WebSockets,
handle calls), metrics, the user's gRPC services and the control port.

A replica's ports are reachable by address, past any proxy, so each refuses
what the proxy's edge refuses (servefleet/_private/edge/limits.py): heads
past the URL (414) and header (431) limits or slower than the head timeout
(408), connections past a cap (503), bodies past the cluster's limit (413);
gRPC ports the same in gRPC's terms (`grpc_server_options`). Where the
numbers come from, since a replica cannot see any proxy's flags:

1. Heads, time and connections: EdgeLimits' defaults, what a proxy started
   without flags applies. A deployment's `runtime.env` may set each one for
   its replicas (`SERVEFLEET_REPLICA_MAX_HEADER_BYTES`, `..._MAX_URL_BYTES`,
   `..._HEADER_TIMEOUT_S`, `..._MAX_CONNECTIONS`, the values a proxy's
   flags take), for proxies run with raised limits. The header limit is
   HOP_HEADROOM_BYTES above that: a head a proxy took must not become one
   its replica refuses once the proxy has added its own headers.
2. Bodies: the cluster's http_options.max_request_body_bytes, which the
   controller publishes in the route table, the proxies' source too: the
   replica watches `routes` besides its own config, so a change reaches it
   without a restart (each route change is then sent to every replica as
   well as to every proxy: one small message per deploy). Until the first
   table comes, and without controllers, the default (100 MB).
3. Handle calls (`x-servefleet-method`) have no body limit: their bodies are
   pickled arguments from the cluster's own processes, where a numpy array
   of hundreds of MB is a legitimate argument (Ray passes such through its
   object store, with no cap of its own). Their heads are limited as any.
4. Idle connections: the HTTP and metrics ports close them after uvicorn's
   5 s, which the data plane's pools stay under (dataplane/upstream.py's
   MAX_IDLE_S); gRPC ports send GOAWAY after the edge's keep-alive timeout
   (75 s), since a gRPC channel pays more to reconnect.
5. The connection cap is derived from the open-file limit, as the proxy's;
   the HTTP port's 503 says `x-servefleet-rejected: overloaded`, so a proxy
   takes the request, which was never read, to another replica.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from servefleet._private.edge.limits import (
    DEFAULT_MAX_BODY_BYTES,
    EdgeLimits,
    connection_cap,
    grpc_server_options,
)
from servefleet._private.edge.protocol import HeadClock, Headers
from servefleet._private.wire import METHOD_HEADER, REJECTED_HEADER, ROUTES_KEY
from servefleet.v1 import watch_pb2

logger = logging.getLogger(__name__)

ENV_PREFIX = "SERVEFLEET_REPLICA_"
# The fields a deployment may set for its replicas (keep-alive is the pools').
ENV_FIELDS = ("max_url_bytes", "max_header_bytes", "header_timeout_s", "max_connections")
# More header bytes a replica takes than its proxies: what a proxy adds to a
# client's head (x-forwarded-for/-proto, x-request-id, the route prefix, the
# caller, trace context, a hop pass) is well under 1 KiB; the rest is margin.
HOP_HEADROOM_BYTES = 8192
# uvicorn's keep-alive, which the HTTP and metrics ports keep (point 4).
HTTP_KEEP_ALIVE_S = 5.0
# The HTTP and metrics ports' 503 past the cap: never read, take it elsewhere.
_BUSY = REJECTED_HEADER + b": overloaded\r\n"


def setting_of(field: str) -> str:
    """How a limit is set for replicas, as their refusals name it."""
    if field == "max_request_body_bytes":
        return "http_options.max_request_body_bytes"
    name = ENV_PREFIX + field.upper()
    if field == "max_header_bytes":
        return f"{name} plus {HOP_HEADROOM_BYTES} for what a proxy adds"
    return name


def limits_from_env(environ: Mapping[str, str], open_files: int) -> EdgeLimits:
    """The replica's limits: EdgeLimits' defaults, or the deployment's
    `SERVEFLEET_REPLICA_*` variables; ValueError naming a variable that is
    not a number or out of range."""
    given: dict[str, Any] = {}
    for field in ENV_FIELDS:
        raw = environ.get(ENV_PREFIX + field.upper())
        if raw is None:
            continue
        try:
            given[field] = float(raw) if field.endswith("_s") else int(raw)
        except ValueError:
            raise ValueError(f"{ENV_PREFIX + field.upper()}: not a number: {raw!r}") from None
    limits = EdgeLimits(**given, keep_alive_timeout_s=HTTP_KEEP_ALIVE_S)
    problem = limits.problem()
    if problem is not None:
        raise ValueError(f"{ENV_PREFIX + problem[0].upper()}: {problem[1]}")
    cap = connection_cap(open_files) if limits.max_connections is None \
        else limits.max_connections
    return replace(limits, max_header_bytes=limits.max_header_bytes + HOP_HEADROOM_BYTES,
                   max_connections=cap)


class ReplicaEdge:
    """One replica's limits, its head clock (shared by its HTTP and metrics
    ports) and the cluster's body limit as last published."""

    def __init__(self, limits: EdgeLimits) -> None:
        self.limits = limits
        self.max_body_bytes = DEFAULT_MAX_BODY_BYTES
        self.clock = HeadClock(limits, server="replica", setting=setting_of, busy=_BUSY,
                               body_limit=self.body_limit)

    def body_limit(self, headers: Headers) -> int | None:
        """What a request may send: none for a handle call (point 3)."""
        for name, _ in headers:
            if name == METHOD_HEADER:
                return None
        return self.max_body_bytes

    def http_protocol(self) -> Any:
        """uvicorn's `http` option for the replica's HTTP and metrics ports."""
        return self.clock.protocol()

    def grpc_options(self) -> list[tuple[str, int]]:
        """Options of the replica's gRPC servers (the user's services, control)."""
        return grpc_server_options(replace(
            self.limits, keep_alive_timeout_s=EdgeLimits.keep_alive_timeout_s))

    def watching(self, on_config: Callable[[watch_pb2.Snapshot], None]
                 ) -> Callable[[watch_pb2.Snapshot], None]:
        """The replica's Watch callback: the route table here, its config to `on_config`."""
        def on_snapshot(snapshot: watch_pb2.Snapshot) -> None:
            if snapshot.key != ROUTES_KEY:
                on_config(snapshot)
            elif not snapshot.deleted:
                limit = snapshot.routes.max_request_body_bytes or DEFAULT_MAX_BODY_BYTES
                if limit != self.max_body_bytes:
                    logger.info("request bodies up to %d bytes (the cluster's "
                                "http_options.max_request_body_bytes)", limit)
                self.max_body_bytes = limit
        return on_snapshot
