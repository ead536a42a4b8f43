"""What travels with a request through every hop: its id and its trace context.

One request, one envelope: `x-request-id` and W3C trace context
(`traceparent`, `tracestate`) go on each hop a request makes (proxy ->
replica, handle call -> replica, the gRPC ingress's metadata, a WebSocket's
handshake), so one request's log lines and spans in every process belong
together. Inside a process the envelope of the request being served lives
in context variables: `logs.REQUEST_ID`, and the trace context
(tracing.py: OpenTelemetry's current context when tracing is on, the
headers as they came when it is off).

A handle call made while serving a request takes the request's id and
trace context with it (handle.py), through any depth of composition.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, MutableMapping
from typing import Any

from servefleet._private.observability.logs import REQUEST_ID, new_request_id
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import REQUEST_ID_HEADER, TRACE_HEADERS

Headers = Iterable[tuple[bytes, bytes]]


def read(headers: Headers) -> tuple[str, tuple[tuple[bytes, bytes], ...]]:
    """The request id among ASGI headers ("" when none) and its trace headers,
    in one pass."""
    request_id = ""
    trace: list[tuple[bytes, bytes]] = []
    for key, value in headers:
        if key == REQUEST_ID_HEADER:
            if value:
                request_id = value.decode("latin-1")
        elif key in TRACE_HEADERS:
            trace.append((key, value))
    return request_id, tuple(trace)


def of_scope(scope: MutableMapping[str, Any]) -> tuple[str, tuple[tuple[bytes, bytes], ...]]:
    """As `read` for an ASGI scope; an id made up for a request without one
    is also added to the scope's headers (user code sees the id it is logged with)."""
    request_id, trace = read(scope["headers"])
    return with_id(scope, request_id), trace


def with_id(scope: MutableMapping[str, Any], request_id: str) -> str:
    """`request_id`, or for "" one made up and added to the scope's headers."""
    if not request_id:
        request_id = new_request_id()
        scope["headers"] = [*scope["headers"], (REQUEST_ID_HEADER, request_id.encode())]
    return request_id


def read_or_new(headers: Headers) -> tuple[str, tuple[tuple[bytes, bytes], ...]]:
    """As `read`, with an id made up for a request that came without one."""
    request_id, trace = read(headers)
    return request_id or new_request_id(), trace


class Carried:
    """A request's envelope taken where a handle call is made (`remote()`:
    in the caller's context, which may be a user thread), and put back in
    the task that runs the call, wherever that runs. As a context manager,
    the call is a span of its own ("call Deployment.method") there."""

    __slots__ = ("request_id", "starts_trace", "trace")

    def __init__(self) -> None:
        self.request_id = REQUEST_ID.get()
        self.trace = tracing.capture()
        # Made outside any request: the call is the root of a trace of its own.
        self.starts_trace = tracing.outside_request()

    @contextlib.contextmanager
    def entered(self, name: str, attributes: dict[str, Any]) -> Iterator[None]:
        """The envelope current in this task while the block runs; with
        tracing on, the call's span (child of the caller's context) too."""
        if self.request_id:
            REQUEST_ID.set(self.request_id)
        outer = tracing.adopt(self.trace)
        try:
            with tracing.made_current(tracing.root(name, attributes) if self.starts_trace
                                      else tracing.child(name, attributes)):
                yield
        finally:
            tracing.leave(outer)
