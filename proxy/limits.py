"""The `servefleet proxy` flags of EdgeLimits (servefleet/_private/edge/limits.py),
one per field (`max_url_bytes` is `--max-url-bytes`; `add_edge_flags`,
`edge_limits`), checked in one place (`EdgeLimits.problem`). edge.py
enforces them.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from servefleet._private.edge.limits import EdgeLimits


def flag_of(field: str) -> str:
    """The flag that sets a field of EdgeLimits."""
    return "--" + field.replace("_", "-")


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
        parser.add_argument(flag_of(field.name), type=float if seconds else int,
                            default=default, metavar="S" if seconds else "N",
                            help=_HELP[field.name].format(default))


def edge_limits(args: argparse.Namespace) -> EdgeLimits:
    """EdgeLimits from the flags; ValueError naming the flag out of range."""
    limits = EdgeLimits(**{field.name: getattr(args, field.name) for field in fields(EdgeLimits)})
    problem = limits.problem()
    if problem is not None:
        raise ValueError(f"{flag_of(problem[0])}: {problem[1]}")
    return limits
