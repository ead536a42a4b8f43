"""Longest-prefix routing of request paths to deployments (pure).

A route prefix matches a path equal to it or continuing it after a "/":
"/api" matches "/api", "/api/" and "/api/v1", not "/apix". "/" matches
everything, so it is the fallback when nothing longer does.

A route may carry its application's traffic policy: `pick()` chooses the
deployment by weight (the ingress when there is no split), and `shadow()`
says, for a fraction of requests, which deployment gets a copy.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from servefleet._private.edge.limits import DEFAULT_MAX_BODY_BYTES
from servefleet.v1 import watch_pb2


@dataclass(frozen=True)
class Target:
    route_prefix: str
    application: str
    deployment: str
    # (deployment, weight) pairs; empty: all to `deployment`.
    split: tuple[tuple[str, float], ...] = ()
    # (deployment, fraction of requests copied to it), or None.
    shadow_of: tuple[str, float] | None = None
    # The application wants a bearer token from the proxy's --http-tokens.
    require_token: bool = False
    # Why the application cannot serve at all (Route.unavailable); "" if it can.
    unavailable: str = ""

    def pick(self, rng: random.Random | None = None) -> str:
        """The deployment this request goes to."""
        if not self.split:
            return self.deployment
        names, weights = zip(*self.split, strict=True)
        return (rng or random).choices(names, weights)[0]

    def shadow(self, rng: random.Random | None = None) -> str | None:
        """The deployment that gets a copy of this request, if any."""
        if self.shadow_of is None or (rng or random).random() >= self.shadow_of[1]:
            return None
        return self.shadow_of[0]


@dataclass(frozen=True)
class GrpcTarget:
    """Where a proxy sends an application's gRPC calls."""

    application: str
    deployment: str
    # Full service names, when the build found them (empty: unknown).
    services: frozenset[str] = frozenset()
    require_token: bool = False
    # Paths of the RPCs of `services` that stream.
    streaming: frozenset[str] = frozenset()
    # Of those, the RPCs whose requests stream (client streaming, bidirectional).
    client_streaming: frozenset[str] = frozenset()
    # (deployment, weight) pairs: the application's traffic split.
    split: tuple[tuple[str, float], ...] = ()
    # Why the application cannot serve at all (GrpcRoute.unavailable).
    unavailable: str = ""

    def pick(self, rng: random.Random | None = None) -> str:
        """The deployment this call goes to."""
        if not self.split:
            return self.deployment
        names, weights = zip(*self.split, strict=True)
        return (rng or random).choices(names, weights)[0]


class GrpcShape(enum.Enum):
    """How a proxy forwards an RPC (on the wire every shape is a stream of
    messages each way; these say how many the proxy expects)."""

    UNARY = "unary"  # one message each way: the cheaper call
    RESPONSES = "responses"  # one request, then responses (server streaming, unknown RPCs)
    REQUESTS = "requests"  # requests stream (client streaming, bidirectional)


class NoGrpcRoute(Exception):
    """No application takes the call: NOT_FOUND with this message."""


# Without a request timeout (the proxy's --request-timeout-s, the cluster's
# http_options.request_timeout_s, a gRPC deadline), a request waits at most
# this long for its answer to begin (HTTP 504, gRPC DEADLINE_EXCEEDED); an
# answer that began, a long stream say, is not cut. nginx's
# proxy_read_timeout and BentoML's default timeout are 60 s too.
DEFAULT_ANSWER_START_S = 60.0


class RouteTable:
    def __init__(self, routes: list[Target] | None = None,
                 request_timeout_s: float = 0.0,
                 max_request_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 grpc: list[GrpcTarget] | None = None) -> None:
        # The cluster's default request timeout; 0: none.
        self.request_timeout_s = request_timeout_s
        self.max_request_body_bytes = max_request_body_bytes
        # Longest first, so the first match is the longest.
        self.routes = sorted(routes or [], key=lambda t: len(t.route_prefix), reverse=True)
        self.grpc = grpc or []
        # Services whose RPC shapes are known, and which of their RPCs stream.
        self._grpc_known = frozenset(s for t in self.grpc for s in t.services)
        self._grpc_streaming = frozenset(m for t in self.grpc for m in t.streaming)
        self._grpc_requests = frozenset(m for t in self.grpc for m in t.client_streaming)

    def deployments(self) -> set[tuple[str, str]]:
        """Every (application, deployment) a route or gRPC route may send to."""
        found: set[tuple[str, str]] = set()
        for app, deployment, split in [*((t.application, t.deployment, t.split)
                                         for t in self.routes),
                                       *((t.application, t.deployment, t.split)
                                         for t in self.grpc)]:
            found.add((app, deployment))
            found.update((app, name) for name, _ in split)
        return found

    @classmethod
    def from_snapshot(cls, table: watch_pb2.RouteTable) -> RouteTable:
        return cls([Target(r.route_prefix, r.application, r.deployment,
                           tuple((t.deployment, t.weight) for t in r.split if t.weight > 0),
                           (r.shadow.deployment, r.shadow.fraction)
                           if r.HasField("shadow") and r.shadow.fraction > 0 else None,
                           r.require_token, r.unavailable)
                    for r in table.routes], table.request_timeout_s,
                   table.max_request_body_bytes or DEFAULT_MAX_BODY_BYTES,
                   [GrpcTarget(r.application, r.deployment, frozenset(r.services),
                               r.require_token, frozenset(r.streaming_methods),
                               frozenset(r.client_streaming_methods),
                               tuple((t.deployment, t.weight) for t in r.split
                                     if t.weight > 0), r.unavailable)
                    for r in table.grpc_routes])

    def match(self, path: str) -> Target | None:
        for target in self.routes:
            prefix = target.route_prefix
            if prefix == "/" or path == prefix or path.startswith(prefix + "/"):
                return target
        return None

    def grpc_shape(self, method: str) -> GrpcShape:
        """How to forward `method` (/package.Service/Method): unary when known
        to be, its requests streamed when known to stream, else one request."""
        if method in self._grpc_requests:
            return GrpcShape.REQUESTS
        service = method[1:].rpartition("/")[0]
        if service in self._grpc_known and method not in self._grpc_streaming:
            return GrpcShape.UNARY
        return GrpcShape.RESPONSES

    def grpc_target(self, application: str, service: str) -> GrpcTarget:
        """The deployment that serves `service` for `application` (Ray Serve's
        `application` metadata); without an application, the one application
        serving `service`, or the only one serving gRPC. NoGrpcRoute otherwise."""
        if application:
            candidates = [t for t in self.grpc if t.application == application]
            if not candidates:
                known = ", ".join(sorted({t.application for t in self.grpc})) or "none"
                raise NoGrpcRoute(f"application {application!r} serves no gRPC here; "
                                  f"applications with gRPC: {known}")
        else:
            candidates = [t for t in self.grpc if service in t.services] or (
                self.grpc if len({t.application for t in self.grpc}) == 1 else [])
            if not candidates:
                known = ", ".join(sorted({t.application for t in self.grpc})) or "none"
                raise NoGrpcRoute(f"no application serves {service}; set the 'application' "
                                  f"metadata key (applications with gRPC: {known})")
            if len({t.application for t in candidates}) > 1:
                names = ", ".join(sorted({t.application for t in candidates}))
                raise NoGrpcRoute(f"{service} is served by several applications ({names}); "
                                  "set the 'application' metadata key")
        # Within the application, the deployment listing the service, else the first.
        return next((t for t in candidates if service in t.services), candidates[0])

    def as_json(self) -> dict[str, str]:
        return {t.route_prefix: f"{t.application}/{t.deployment}" if t.deployment
                else f"{t.application} (cannot serve)" for t in
                sorted(self.routes, key=lambda t: t.route_prefix)}
