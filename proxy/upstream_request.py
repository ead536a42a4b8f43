"""What a replica gets of a client's request: the headers the proxy forwards,
the raw target, and what a deployment's router is told.

Hop-by-hop headers, Host's length and the client's own x-request-id,
x-forwarded-*, trace context and x-servefleet-* headers are the proxy's to
say: the request id and trace context are set per attempt
(dataplane/forward.py, tracing.py), x-forwarded-* by forwarded.py.
"""

from __future__ import annotations

from starlette.types import Scope

from servefleet._private.dataplane.routers import RequestInfo
from servefleet._private.wire import (
    CALLER_HEADER,
    OWN_HEADER_PREFIX,
    REQUEST_ID_HEADER,
    ROUTE_PREFIX_HEADER,
    ROUTING_KEY_HEADER,
    TRACE_HEADERS,
)

from .answers import HOP_BY_HOP, and_named_by_connection
from .forwarded import Forwarded

# Host and length are recomputed for the request forwarded; the request id,
# x-forwarded-* (forwarded.py) and, beside these, every x-servefleet-* header
# (OWN_HEADER_PREFIX: a handle call's marker, the route prefix, the caller, the
# multiplexed models, ...) are the proxy's to say.
NOT_FORWARDED = HOP_BY_HOP | {b"host", b"content-length", b"expect", REQUEST_ID_HEADER,
                              b"x-forwarded-for", b"x-forwarded-proto"} | TRACE_HEADERS


def upstream_headers(scope: Scope, request_id: str, route_prefix: str, forwarded: Forwarded,
                      caller: str | None = None) -> list[tuple[bytes, bytes]]:
    """The headers a replica gets. With `caller` (the name of the token the
    proxy checked) the token itself stays here and the name goes on."""
    dropped = and_named_by_connection(scope["headers"], NOT_FORWARDED)
    if caller is not None:
        dropped = dropped | {b"authorization"}
    # The client's Host goes first, and on to the replica (upstream.py writes
    # it in place of the replica's address), as Ray's proxy keeps it: an app
    # that builds URLs (url_for, a trailing-slash redirect) builds the ones
    # the client used, never the replica's own address.
    host = next(((k, v) for k, v in scope["headers"] if k == b"host"), None)
    headers = ([host] if host is not None else []) + [
        (k, v) for k, v in scope["headers"]
        if k not in dropped and not k.startswith(OWN_HEADER_PREFIX)
    ] + [(REQUEST_ID_HEADER, request_id.encode("latin-1")),
                    (ROUTE_PREFIX_HEADER, route_prefix.encode()), *forwarded.headers(scope)]
    if caller is not None:
        headers.append((CALLER_HEADER, caller.encode()))
    return headers


def routing_info(scope: Scope, model: bytes) -> RequestInfo:
    """What the deployment's router is told of a request (built only when the
    deployment has a router of its own: routers.py)."""
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    return RequestInfo(model.decode("latin-1"), headers.get(ROUTING_KEY_HEADER.decode(), ""),
                       scope["method"], scope["path"], headers)


def raw_target(scope: Scope) -> bytes:
    """The raw target, as the client sent it: the decoded path could carry line
    breaks into the request line, or change meaning (%2F, %3F)."""
    query = scope.get("query_string", b"")
    return (scope.get("raw_path") or scope["path"].encode()) + (b"?" + query if query else b"")
