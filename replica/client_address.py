"""Who the client is, for user code: x-forwarded-for and -proto from a trusted proxy.

The proxy (Python or HAProxy) adds the client's address to x-forwarded-for
and says the scheme in x-forwarded-proto (proxy/forwarded.py). When the
peer that sent the request is trusted (`FORWARDED_ALLOW_IPS`: addresses,
networks or `*`; default `127.0.0.1,::1`, as uvicorn's), the scope's
`client` and `scheme` become the ones those headers name, with uvicorn's
rules (docs/guides/http-proxy.md):

- the client is the rightmost address in x-forwarded-for that is not a
  trusted proxy's (a client cannot claim another address by sending its
  own header: the proxy appends to it); when every one is trusted, the
  leftmost; with `*`, always the leftmost;
- the scheme is x-forwarded-proto's when it is http, https, ws or wss
  (ws/wss for a WebSocket).

uvicorn's own middleware parses the header on every request, which cost a
replica about a tenth of its CPU on a no-op behind a proxy
(bench/data_plane.py); the same proxy sends the same few values again and
again, so the answers are remembered here (a bounded table).
"""

from __future__ import annotations

import ipaddress
import os

from starlette.types import ASGIApp, Receive, Scope, Send

DEFAULT_TRUSTED = "127.0.0.1,::1"
SCHEMES = {"http", "https", "ws", "wss"}
# Distinct x-forwarded-for values remembered (then forgotten all at once).
REMEMBERED = 4096
# ... of at most this many bytes each (a longer one is read every time).
REMEMBERED_BYTES = 256

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Trusted:
    """The peers whose forwarding headers count: addresses, networks, other
    names as written (a Unix socket, say), or `*` for any."""

    def __init__(self, spec: str) -> None:
        entries = [e.strip() for e in spec.split(",")]
        self.any = spec == "*"  # as uvicorn: "*" alone; in a list it is a name
        self._addresses: set[Address] = set()
        self._networks: list[Network] = []
        self._names: set[str] = set()
        for entry in entries:
            try:
                if "/" in entry:
                    self._networks.append(ipaddress.ip_network(entry))
                else:
                    self._addresses.add(ipaddress.ip_address(entry))
            except ValueError:
                self._names.add(entry)
        self._known: dict[str, bool] = {}

    def __contains__(self, host: str) -> bool:
        if self.any:
            return True
        if not host:
            return False
        found = self._known.get(host)
        if found is None:
            found = self._decide(host)
            if len(host) <= 253:  # a DNS name's length at most: nothing bigger is kept
                if len(self._known) >= REMEMBERED:
                    self._known.clear()
                self._known[host] = found
        return found

    def _decide(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return host in self._names
        return address in self._addresses or any(address in n for n in self._networks)


def host_and_port(entry: str) -> tuple[str, int]:
    """("1.2.3.4", 80) of "1.2.3.4:80", ("::1", 80) of "[::1]:80"; port 0
    when there is none, and anything else as it is (then nothing trusts it)."""
    if entry.startswith("["):
        end = entry.find("]")
        rest = entry[end + 1:] if end >= 0 else ""
        if end < 0 or (rest and not rest.startswith(":")):
            return entry, 0
        return entry[1:end], _port(rest[1:]) or 0
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        number = _port(port)
        return (entry, 0) if number is None else (host, number)
    return entry, 0


def _port(text: str) -> int | None:
    try:
        return int(text)  # as uvicorn: int()'s rules, "+80" and " 80" too
    except ValueError:  # not a number, or past int()'s 4,300 digits
        return None


class ClientAddress:
    """ASGI middleware: `client` and `scheme` from a trusted proxy's headers."""

    def __init__(self, app: ASGIApp, trusted: str | None = None) -> None:
        self.app = app
        self.trusted = Trusted(trusted if trusted is not None else
                               os.environ.get("FORWARDED_ALLOW_IPS", DEFAULT_TRUSTED))
        self._clients: dict[bytes, tuple[str, int] | None] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            peer = scope.get("client")
            if self.trusted.any or (peer is not None and peer[0] in self.trusted):
                self._take(scope)
        await self.app(scope, receive, send)

    def _take(self, scope: Scope) -> None:
        proto: bytes | None = None
        forwarded: list[bytes] = []
        for name, value in scope["headers"]:
            if name == b"x-forwarded-proto":
                proto = value
            elif name == b"x-forwarded-for":
                forwarded.append(value)
        if proto is not None:
            scheme = proto.decode("latin-1").strip()
            if scheme in SCHEMES:
                scope["scheme"] = scheme.replace("http", "ws") \
                    if scope["type"] == "websocket" else scheme
        if forwarded:
            joined = b", ".join(forwarded)
            client = self._clients.get(joined, False)
            if client is False:
                client = self._client(joined.decode("latin-1"))
                if len(joined) <= REMEMBERED_BYTES:  # a client writes the left of it
                    if len(self._clients) >= REMEMBERED:
                        self._clients.clear()
                    self._clients[joined] = client
            if client is not None:
                scope["client"] = client

    def _client(self, forwarded_for: str) -> tuple[str, int] | None:
        entries = [entry.strip() for entry in forwarded_for.split(",")]
        if not self.trusted.any:
            for entry in reversed(entries):
                host, port = host_and_port(entry)
                if host not in self.trusted:
                    return (host, port) if host else None
        host, port = host_and_port(entries[0])  # with `*`, or when every one is trusted
        return (host, port) if host else None
