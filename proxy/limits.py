"""What one client may hold of the proxy: `EdgeLimits`, each field the
`servefleet proxy` flag of its name (`max_url_bytes` is `--max-url-bytes`;
`add_edge_flags`, `edge_limits`), checked in one place (`EdgeLimits.problem`).
edge.py enforces them.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

# The longest request target httptools parses (its URL parser counts in 16 bits).
URL_PARSER_LIMIT = 65535


@dataclass(frozen=True)
class EdgeLimits:
    """What one client may hold of the proxy; each field is the `servefleet
    proxy` flag of its name (`--max-url-bytes`, ...)."""

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
    # 0: no cap; None: the proxy derives one from its open-file limit (main.py).
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


_HELP = {
    "max_header_bytes": "answer 431 and close once a request's header lines pass this many "
                        "bytes, as they arrive (default {})",
    "max_url_bytes": "answer 414 and close once a request target passes this many bytes "
                     "(default and most {})",
    "header_timeout_s": "answer 408 and close when a request's head has not all come this "
                        "long after its first byte, or after the connection opened "
                        "(default {:g})",
    "keep_alive_timeout_s": "close a client connection idle this long after an answer "
                            "(default {:g})",
    "max_connections": "answer a new client connection 503 and close it while N are open "
                       "(per process; 0: no cap; default: half the open-file limit, which "
                       "the proxy raises to its hard limit)",
}


def add_edge_flags(parser: argparse.ArgumentParser) -> None:
    """The `servefleet proxy` flags of EdgeLimits' fields."""
    defaults = EdgeLimits()
    for field in fields(EdgeLimits):
        default = getattr(defaults, field.name)
        seconds = field.name.endswith("_s")
        parser.add_argument("--" + field.name.replace("_", "-"), type=float if seconds else int,
                            default=default, metavar="S" if seconds else "N",
                            help=_HELP[field.name].format(default))


def edge_limits(args: argparse.Namespace) -> EdgeLimits:
    """EdgeLimits from the flags; ValueError naming the flag out of range."""
    limits = EdgeLimits(**{field.name: getattr(args, field.name) for field in fields(EdgeLimits)})
    problem = limits.problem()
    if problem is not None:
        raise ValueError(f"--{problem[0].replace('_', '-')}: {problem[1]}")
    return limits
