"""Who may read the controller's HTTP face (--metrics-listen), and by what name.

Everything this face serves (metrics, scrape targets with every process's
address, the cluster's status with its error texts) is for operators, so:

- **Host names.** A request whose Host is a name (not an IP literal) must
  name one of `allowed_hosts`: localhost and the names given with
  `--allow-http-host`. A web page on another site cannot then read this face
  from an operator's browser by pointing its own DNS name at this address
  (DNS rebinding); IP literals cannot be rebound. Refused: 421.
- **Credentials, when the cluster has any.** With TLS the face serves HTTPS
  with the controller's certificate (clients check it against the cluster
  CA), and asks for, but does not require, a client certificate. With TLS or
  tokens configured, every path but the dashboard's page (static, without
  data: it asks the browser for a token) needs a caller of role reader,
  deployer or admin: `Authorization: Bearer TOKEN` from --auth-tokens, or a
  client certificate of one of those roles. Refused: 401, also for an
  Authorization header that cannot be read (not `Bearer TOKEN`, several of
  them), whatever certificate comes with it. Only a cluster with neither
  (the local, loopback default) keeps the face open. The REST API's writes
  (PUT, DELETE) also need a role that may deploy (rest.py, `caller_role`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import ssl
from collections.abc import Iterable
from typing import Any

from servefleet._private.edge.http_protocol import CoalescingHttpToolsProtocol
from servefleet._private.security.bearer import MalformedCredential, header_bearer
from servefleet._private.security.hop_tls import server_context
from servefleet._private.security.revocation import RevokedSerials
from servefleet._private.security.tls import TlsFiles

from .auth import Authorizer

ROLES = frozenset({"reader", "deployer", "admin"})
OPEN_PATHS = frozenset({"/-/dashboard", "/-/dashboard/"})
PEER_ROLE = "servefleet.peer_role"  # the scope key the protocol below sets


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def host_name(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The Host header's name, without its port ("" without one)."""
    raw = next((v for k, v in headers if k == b"host"), b"").decode("latin-1").strip()
    if raw.startswith("["):  # [::1]:8265
        return raw[:raw.find("]") + 1] if "]" in raw else raw
    return raw.rpartition(":")[0] if raw.count(":") == 1 else raw


class HttpGate:
    def __init__(self, authorizer: Authorizer, allowed_hosts: Iterable[str] = ()) -> None:
        self._authorizer = authorizer
        self._hosts = {"localhost", *(h.lower() for h in allowed_hosts)}

    def refusal(self, scope: dict[str, Any]) -> tuple[int, str] | None:
        """(status, why) when the request may not be answered, else None."""
        host = host_name(scope["headers"]).lower()
        if host and not _is_ip(host) and host not in self._hosts:
            return 421, (f"this controller does not answer to the name {host[:200]!r}; "
                         "add it with --allow-http-host")
        if not self._authorizer.enabled or scope["path"] in OPEN_PATHS:
            return None
        try:
            role = self._role(scope)
        except MalformedCredential as e:
            return 401, f"unreadable credentials: {e}"
        if role in ROLES:
            return None
        if role is None:
            return 401, ("this controller needs credentials here: Authorization: Bearer TOKEN "
                         "(reader or above), or a client certificate")
        return 401, f"the role {role!r} may not read this (reader, deployer or admin may)"

    def caller_role(self, scope: dict[str, Any]) -> str:
        """The role of a caller `refusal` let through: admin in a cluster
        without credentials (rest.py checks it for writes)."""
        if not self._authorizer.enabled:
            return "admin"
        try:
            return self._role(scope) or ""
        except MalformedCredential:
            return ""

    def _role(self, scope: dict[str, Any]) -> str | None:
        """The role of the bearer token when there is one ("" for a token not
        in the table), else of the client certificate; MalformedCredential for
        an Authorization that cannot be read, whatever the certificate."""
        token = header_bearer(scope["headers"])
        if token is not None:
            tokens = self._authorizer.tokens
            entry = tokens.lookup(token) if tokens is not None else None
            return entry.role if entry is not None else ""
        return scope.get(PEER_ROLE)


def server_tls(tls: TlsFiles | None, revoked: RevokedSerials) -> dict[str, Any]:
    """start_http_server's options for HTTPS with the controller's certificate,
    asking for a client certificate of the cluster's CA, none `revoked`; {}
    without TLS."""
    if tls is None:
        return {}
    return {"ssl": server_context(tls, revoked, client_cert=ssl.CERT_OPTIONAL),
            "http": PeerRoleProtocol}


class PeerRoleProtocol(CoalescingHttpToolsProtocol):
    """Also puts the role of the client's verified certificate (its OU) in each
    request's scope, as the controller's gRPC server reads it."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        cert = transport.get_extra_info("peercert") or {}
        self.peer_role = next((value for rdn in cert.get("subject", ())
                               for key, value in rdn if key == "organizationalUnitName"), None)
        super().connection_made(transport)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[PEER_ROLE] = self.peer_role  # type: ignore[literal-required]
