"""What one client may hold of a server of the cluster: `EdgeLimits`, checked in
one place (`EdgeLimits.problem`), for every port that takes connections from
outside the process: the proxy's edge (each field the `servefleet proxy`
flag of its name, proxy/limits.py) and each port a replica opens
(replica/edge.py). edge_protocol.py enforces them over HTTP/1.1;
`grpc_server_options` says the same to a gRPC server.
"""

from __future__ import annotations

from dataclasses import dataclass

from servefleet._private.wire import GRPC_MAX_REQUEST_BYTES

# The longest request target httptools parses (its URL parser counts in 16 bits).
URL_PARSER_LIMIT = 65535
# http_options.max_request_body_bytes when the cluster sets none.
DEFAULT_MAX_BODY_BYTES = 100 * 1024 * 1024


@dataclass(frozen=True)
class EdgeLimits:
    """What one client may hold of a server; for the proxy each field is the
    `servefleet proxy` flag of its name (`--max-url-bytes`, ...)."""

    # 414 past this many bytes of request target (path and query). uvicorn
    # answered a bare 400 past 65535, which httptools cannot parse.
    max_url_bytes: int = URL_PARSER_LIMIT
    # 431 past this many bytes of header lines (name, value, ": " and CRLF each).
    max_header_bytes: int = 64 * 1024
    # 408 and close when a request's head has not all come this long after
    # its first byte (or after the connection opened, for the first request).
    # A client that means well sends its head in one packet; nginx's
    # client_header_timeout and Node's headersTimeout are 60 s, HAProxy's
    # `timeout http-request` has no default and 10 s in its examples.
    header_timeout_s: float = 10.0
    # Close a connection that sends nothing this long after an answer. It
    # must outlast the idle time of clients' connection pools, or a client
    # sends on a connection the proxy is closing and gets a reset for a
    # request no one read (httpx keeps idle connections 5 s, aiohttp 15 s):
    # 5 s, uvicorn's and Node's default, raced httpx's own 5 s (a chaos run
    # caught one such reset). nginx's default is 75 s; so is this one.
    # Behind a load balancer that keeps idle connections open longer,
    # set it above the balancer's (AWS ALB: 60 s; Go's http.Transport: 90 s).
    keep_alive_timeout_s: float = 75.0
    # Open client connections past which a new one gets 503 and is closed;
    # 0: no cap; None: the server derives one from its open-file limit
    # (`connection_cap`).
    max_connections: int | None = None

    def problem(self) -> tuple[str, str] | None:
        """The first field out of range, and why; None when all are fine."""
        checks = (
            ("max_url_bytes", 256 <= self.max_url_bytes <= URL_PARSER_LIMIT,
             f"between 256 and {URL_PARSER_LIMIT} (the longest target httptools parses)"),
            ("max_header_bytes", 1024 <= self.max_header_bytes <= 16 * 1024 * 1024,
             "between 1024 and 16777216"),
            ("header_timeout_s", 0 < self.header_timeout_s <= 3600,
             "more than 0 and at most 3600 seconds"),
            ("keep_alive_timeout_s", 0 < self.keep_alive_timeout_s <= 3600,
             "more than 0 and at most 3600 seconds"),
            ("max_connections", self.max_connections is None or self.max_connections >= 0,
             "0 (no cap) or more"),
        )
        for name, ok, expected in checks:
            if not ok:
                return name, f"{expected}, got {getattr(self, name)}"
        return None


# Open files kept for other than client connections (logs, listeners, the
# controller's channel) when the connection cap is derived from the file limit.
RESERVED_FILES = 64


def connection_cap(open_files: int) -> int:
    """The cap on client connections a server derives from its open-file
    limit: half of what is left after RESERVED_FILES (a proxy holds a second
    file per request, to its replica; a replica's user code opens its own)."""
    return max(1, (open_files - RESERVED_FILES) // 2)


def grpc_server_options(limits: EdgeLimits) -> list[tuple[str, int]]:
    """`limits` as options of a gRPC server (grpc.aio.server(options=...)).

    gRPC has its own names for the same things: metadata is its header
    (refused RESOURCE_EXHAUSTED past the limit; soft and hard limit equal, so
    the answer does not depend on chance, as between gRPC's default 8 KiB
    soft and 16 KiB hard limits); the handshake timeout bounds how long a
    connection may take to start talking HTTP/2, as the head timeout does;
    an idle connection is sent GOAWAY after the keep-alive timeout, and the
    client reconnects when it next calls; past the connection cap a new
    connection is closed at once (it never sees an answer: gRPC has no way
    to say why). Messages are bounded at GRPC_MAX_REQUEST_BYTES, what the
    proxy's gRPC ingress takes too. `max_connections` must be resolved (not None).
    """
    options = [
        ("grpc.max_metadata_size", limits.max_header_bytes),
        ("grpc.absolute_max_metadata_size", limits.max_header_bytes),
        ("grpc.server_handshake_timeout_ms", int(limits.header_timeout_s * 1000)),
        ("grpc.max_connection_idle_ms", int(limits.keep_alive_timeout_s * 1000)),
        ("grpc.max_receive_message_length", GRPC_MAX_REQUEST_BYTES),
    ]
    if limits.max_connections:
        options.append(("grpc.max_allowed_incoming_connections", limits.max_connections))
    return options
