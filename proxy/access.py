"""Who may use what on the proxy's HTTP port: bearer tokens and the admin paths.

- `bearer_name`: the name of a request's bearer token in the proxy's
  `--http-tokens` table. Routes of applications with require_token want
  one; the token stays at the proxy, and its name goes on (x-servefleet-caller).
- `AdminAccess`: who may read `/-/routes` (every application's route
  prefix) and `/-/metrics` (every deployment's name and traffic), by
  `--admin-paths`:
  - `loopback` (the default): a client whose connection comes from a
    loopback address (127.0.0.0/8, ::1) and that no proxy there relays (the
    request has no x-forwarded-for or forwarded header: a load balancer on
    the same host is not a local client), or any client with a token;
  - `token`: a client with a token, from anywhere;
  - `public`: anyone (for a port only a private network reaches).
  `/-/healthz` is not an admin path: load balancers probe it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from servefleet._private.security.tokens import TokenTable

ADMIN_MODES = ("loopback", "token", "public")
ADMIN_PATHS = frozenset({"/-/routes", "/-/metrics"})
_RELAYED = (b"x-forwarded-for", b"forwarded")
# An answer the proxy gives instead of an admin path's: status, text, extra headers.
Refusal = tuple[int, str, tuple[tuple[bytes, bytes], ...]]


def bearer_name(scope: Mapping[str, Any], tokens: TokenTable | None) -> str | None:
    """The name of the request's bearer token, or None when it has no valid one."""
    if tokens is None:
        return None
    for k, v in scope["headers"]:
        if k == b"authorization":
            scheme, _, token = v.decode("latin-1").partition(" ")
            entry = tokens.lookup(token.strip()) if scheme.lower() == "bearer" else None
            return entry.name if entry is not None else None
    return None


def is_local(scope: Mapping[str, Any]) -> bool:
    """Whether the connection's peer is a loopback address relaying for no one."""
    client = scope.get("client")
    if not client:
        return False
    try:
        address = ipaddress.ip_address(client[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback and not any(k in _RELAYED for k, _ in scope["headers"])


class AdminAccess:
    def __init__(self, mode: str = "loopback") -> None:
        """ValueError naming the modes when `mode` is none of them."""
        if mode not in ADMIN_MODES:
            raise ValueError(f"{mode!r}: expected one of {', '.join(ADMIN_MODES)}")
        self.mode = mode

    def refusal(self, scope: Mapping[str, Any], tokens: TokenTable | None) -> Refusal | None:
        """None when the request may read its admin path; else the answer:
        401 (with www-authenticate) when a token would do, 403 when this
        proxy has no tokens to check."""
        if self.mode == "public" or (self.mode == "loopback" and is_local(scope)):
            return None
        if bearer_name(scope, tokens) is not None:
            return None
        who = "loopback clients and bearer tokens" if self.mode == "loopback" else \
            "bearer tokens"
        text = f"{scope['path']} answers {who} only (--admin-paths {self.mode})"
        if tokens is None:
            return 403, text + "; this proxy has no --http-tokens", ()
        return 401, text + ": authorization: Bearer TOKEN", (
            (b"www-authenticate", b'Bearer realm="servefleet"'),)
