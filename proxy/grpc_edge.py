"""Who may use the gRPC ingress port's own services: the HTTP port's rules.

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
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

import grpc

from servefleet._private.security.tokens import TokenTable

from .access import AdminAccess

_CODES = {401: grpc.StatusCode.UNAUTHENTICATED, 403: grpc.StatusCode.PERMISSION_DENIED}


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
