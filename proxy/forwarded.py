"""What a replica is told about the client: x-forwarded-for and x-forwarded-proto.

The proxy adds the connection's peer to x-forwarded-for (after what earlier
proxies put there) and says how the request reached it in
x-forwarded-proto, as nginx's `$proxy_add_x_forwarded_for` and `$scheme`.
A replica's server trusts the proxy (loopback) and takes the client from
the right end of the list, so a client cannot claim another address.

Behind a load balancer that terminates TLS, the balancer's own
x-forwarded-proto is kept when the balancer is one of the proxy's trusted
forwarders (`--forwarded-allow-ips`, by default loopback, as uvicorn's
FORWARDED_ALLOW_IPS); anyone else's is replaced.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

DEFAULT_TRUSTED = "127.0.0.1,::1"
PROTOS = {b"http", b"https"}


class Forwarded:
    def __init__(self, trusted: str = DEFAULT_TRUSTED) -> None:
        """`trusted`: comma-separated addresses or networks, or "*" for any.
        ValueError naming the entry that is neither."""
        entries = [e.strip() for e in trusted.split(",") if e.strip()]
        self.any = "*" in entries
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in entries:
            if entry == "*":
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise ValueError(f"{entry!r} is not an IP address or network") from None

    def trusts(self, host: str) -> bool:
        if self.any:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False  # a Unix socket's peer, say
        return any(address in network for network in self.networks)

    def headers(self, scope: Mapping[str, Any]) -> list[tuple[bytes, bytes]]:
        """The two headers for the request `scope` forwards (none without a peer)."""
        client = scope.get("client")
        if not client:
            return []
        before = proto = b""
        for name, value in scope["headers"]:
            if name == b"x-forwarded-for":
                before = before + b", " + value if before else value
            elif name == b"x-forwarded-proto":
                proto = value.strip().lower()
        if proto not in PROTOS or not self.trusts(client[0]):
            proto = b"https" if scope["scheme"] in ("https", "wss") else b"http"
        address = client[0].encode()
        return [(b"x-forwarded-for", before + b", " + address if before else address),
                (b"x-forwarded-proto", proto)]
