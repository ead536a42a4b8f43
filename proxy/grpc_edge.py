"""The gRPC ingress port under the HTTP port's rules: who may use its own
services, and what one client may hold of it.

`ListApplications` names every application and the gRPC services each
serves, as `/-/routes` names every route: it answers whom `--admin-paths`
lets read `/-/routes` (access.AdminAccess), with the call's peer and
metadata standing in for the HTTP request's client and headers:

- `loopback` (the default): a peer on a loopback address whose call carries
  no `x-forwarded-for` or `forwarded` metadata (a balancer on the same host
  relays for others), or a caller with a bearer token of `--http-tokens`;
- `token`: a caller with such a token; `public`: anyone.

Refused: UNAUTHENTICATED when a token would do (the HTTP port's 401),
PERMISSION_DENIED when this proxy has no `--http-tokens` (its 403).
`Healthz` and `grpc.health.v1` stay open: load balancers probe them, as they
do `/-/healthz`. The users' own services follow their application's
`require_token` (grpc_ingress.py).

`ingress_options`: the edge's limits (--max-connections,
--keep-alive-timeout-s, --header-timeout-s, --max-header-bytes) in gRPC's
terms (edge_limits.grpc_server_options), as the HTTP port has them; each
port counts its own connections. gRPC has no answer for a connection past
the cap: it is closed at accept, and the client sees UNAVAILABLE ("Socket
closed") and retries, where the HTTP port answers 503 first. Plus a bound on
the streams one connection may hold at once (HTTP/2's
MAX_CONCURRENT_STREAMS): a client's calls past it wait in the client.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

import grpc

from servefleet._private.dataplane.grpc_forward import GRPC_MAX_ANSWER_BYTES
from servefleet._private.edge.limits import EdgeLimits, grpc_server_options
from servefleet._private.security.tokens import TokenTable

from .access import AdminAccess

_CODES = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED}
# Streams (calls) one connection may hold at once: each is a task here and a
# call to a replica. nginx's http2_max_concurrent_streams default; HTTP/2
# asks for no fewer than 100. gRPC's own default is no bound.
MAX_STREAMS_PER_CONNECTION = 128


def ingress_options(limits: EdgeLimits) -> list[tuple[str, int]]:
    """The ingress server's options (module docstring); `limits.max_connections`
    resolved (0: no cap). Answers pass up to what the proxy takes from replicas."""
    return [*grpc_server_options(limits),
            ("grpc.max_concurrent_streams", MAX_STREAMS_PER_CONNECTION),
            ("grpc.max_send_message_length", GRPC_MAX_ANSWER_BYTES)]


def peer_address(peer: str) -> tuple[str, int] | None:
    """(host, port) of a gRPC peer ("ipv4:127.0.0.1:5000", "ipv6:%5B::1%5D:5000");
    None for another kind (a Unix socket)."""
    kind, _, rest = unquote(peer).partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port) if port.isdigit() else 0


def call_scope(path: str, peer: str, metadata: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """What AdminAccess reads of an HTTP request, for a gRPC call."""
    return {"path": path, "client": peer_address(peer),
            "headers": [(key.encode(), value if isinstance(value, bytes)
                         else value.encode(errors="replace")) for key, value in metadata]}


def admin_refusal(admin: AdminAccess, tokens: TokenTable | None, path: str,
                  context: grpc.aio.ServicerContext) -> tuple[grpc.StatusCode, str] | None:
    """None when the call may read `path`; else its status and why."""
    refusal = admin.refusal(call_scope(path, context.peer(),
                                       context.invocation_metadata() or ()), tokens)
    if refusal is None:
        return None
    status, text, _ = refusal
    return _CODES[status], text
