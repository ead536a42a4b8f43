"""Spans of servefleet's own work, and the trace context each hop passes on.

Off by default (TRACER is None: every function here is then one check and
a return); tracing_setup.configure() turns it on in a process. The spans
(docs/observability.md, "Tracing"; gRPC calls, WebSockets and the
controller's actions have theirs too):

    proxy      "POST /classify"      SERVER  the proxy's handling of a request
                 "queue"             INTERNAL waiting for a replica with room
                 "send to replica"   CLIENT  one attempt, with its replica
                                             (and, when not taken, why)
    replica    "Model.__call__"      SERVER  the replica's handling
                 "queued"            INTERNAL waiting for a user thread (>= 1 ms)
                 "@batch wait"       INTERNAL an item waiting for its batch
                 "user code"         INTERNAL the user's code; its own spans
                                             are children of this one
    handle     "call Next.method"    INTERNAL a handle call; its attempts as above

Every span carries the application, deployment, replica (where one is
known) and request id as attributes. The current OpenTelemetry context is
the request's while user code runs (sync code in threads included: the
threads run in the request's copied context), so a user's
`tracer.start_as_current_span(...)` joins the request's trace with no setup.

What passes between hops is W3C trace context (`traceparent`, `tracestate`;
other propagation formats, OTEL_PROPAGATORS, are not read) next to
`x-request-id`. With tracing off in a process, the headers that came
in go out unchanged (PASSED): a hop without tracing does not cut a trace.
A request its trace did not sample goes the same way: its first hop's
sampling decision is the only tracing work it causes, so that a low
sampling ratio costs next to nothing. Where a trace starts:

- at a proxy, for a request that came without trace context. What the
  proxy did not sample goes on to a replica's HTTP port (requests,
  WebSockets) with no trace headers at all: one header less on each hop
  of 99 requests in 100 at 1%. It goes on to a replica's gRPC port with
  an unsampled `traceparent`, since that port also serves proxyless
  clients, for whom it is the first hop;
- so a replica starts no trace for what comes to its HTTP port (only
  proxies and handle calls come there, and they decided: `roots=False`),
  and starts one for a gRPC call that came without context;
- a handle call made outside any request (a driver script, a task of
  user code's own) starts a trace of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from servefleet._private.wire import TRACE_HEADERS, TRACEPARENT_HEADER, TRACESTATE_HEADER

# The OpenTelemetry tracer when tracing is on in this process; None when off.
TRACER: Any = None
# With tracing off, or for a request not sampled: the trace headers that
# came with the request being served (or its first hop's unsampled ones),
# passed on unchanged by the hops it makes.
PASSED: contextvars.ContextVar[tuple[tuple[bytes, bytes], ...]] = contextvars.ContextVar(
    "tracing_passed_headers", default=())

_api: Any = None  # opentelemetry.trace and .context, when on


# Whether the sampler follows a parent's sampled flag (parentbased_*, the
# default): then a request whose parent was not sampled costs no SDK call.
_parent_based = True
# With a trace id ratio sampler (traceidratio, parentbased_traceidratio): its
# bound, so that a request starting a trace is sampled (or not) here, as the
# SDK's sampler would, without a span made for a trace that records nothing
# (the SDK's costs about 9 us, a tenth of what the proxy spends on a request).
_root_bound: int | None = None
_LOW_64 = (1 << 64) - 1
# Where the SDK takes its next trace id (tracing_setup.PresetIds): a trace
# this module sampled keeps the id it was sampled by.
_preset: Any = None


def on() -> bool:
    return TRACER is not None


def install(tracer: Any, parent_based: bool = True, root_bound: int | None = None,
            preset: Any = None) -> None:
    """Turn tracing on in this process with an OpenTelemetry tracer (tracing_setup)."""
    global TRACER, _api, _parent_based, _root_bound, _preset
    from opentelemetry import context, trace
    _api = (trace, context)
    _parent_based = parent_based
    _root_bound, _preset = (root_bound, preset) if preset is not None else (None, None)
    TRACER = tracer


# Whether the request being served is sampled, once known (None: not known
# here; ask OpenTelemetry's current span): a context variable read costs a
# tenth of that, on every hop of every request.
_SAMPLED: contextvars.ContextVar[bool | None] = contextvars.ContextVar(
    "tracing_sampled", default=None)


def recording() -> bool:
    """Whether the work under way is in a sampled trace: spans of it are
    recorded. False with tracing off, and for a request its trace's root
    did not sample (the usual case at a low ratio: such a request then
    costs one sampling decision at its first hop and nothing after)."""
    if TRACER is None:
        return False
    known = _SAMPLED.get()
    return known if known is not None else _api[0].get_current_span().is_recording()


def uninstall() -> None:
    global TRACER
    TRACER = None


def current_ids() -> tuple[str, str]:
    """(trace id, span id) of the current span as hex, ("", "") when there is none."""
    if TRACER is None:
        return "", ""
    ctx = _api[0].get_current_span().get_span_context()
    if not ctx.is_valid:
        return "", ""
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def incoming(headers: Iterable[tuple[Any, Any]]) -> tuple[tuple[bytes, bytes], ...]:
    """The trace headers among a request's (bytes or str pairs), as bytes."""
    found = []
    for key, value in headers:
        name = key if isinstance(key, bytes) else key.encode("latin-1")
        if name in TRACE_HEADERS:
            found.append((name, value if isinstance(value, bytes) else
                          str(value).encode("latin-1")))
    return tuple(found)


def _parent(trace_headers: Sequence[tuple[bytes, bytes]]) -> Any:
    """The remote parent W3C trace context names, as a Context; None when
    there is none or it is malformed (a new trace, as the specification has
    it). Parsed here: the SDK's propagator costs several times as much."""
    traceparent = tracestate = None
    for key, value in trace_headers:
        if key == TRACEPARENT_HEADER:
            traceparent = value.strip()
        elif key == TRACESTATE_HEADER:
            tracestate = value
    if traceparent is None:
        return None
    parts = traceparent.split(b"-")
    if (len(parts) < 4 or len(parts[0]) != 2 or parts[0] == b"ff" or len(parts[1]) != 32
            or len(parts[2]) != 16 or len(parts[3]) != 2 or (parts[0] == b"00"
                                                              and len(parts) != 4)):
        return None
    try:
        trace_id, span_id, flags = (int(part, 16) for part in parts[1:4])
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    trace = _api[0]
    state = trace.TraceState.from_header([tracestate.decode("latin-1")]) if tracestate \
        else None
    context = trace.SpanContext(trace_id, span_id, is_remote=True,
                                trace_flags=trace.TraceFlags(flags), trace_state=state)
    return trace.set_span_in_context(trace.NonRecordingSpan(context))


class Served:
    """A SERVER span made current in this task; `finish` ends it."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any, token: Any) -> None:
        self.span, self.token = span, token

    def set(self, key: str, value: Any) -> None:
        if value != "" and value is not None and self.span.is_recording():
            self.span.set_attribute(key, value)

    def finish(self, status_code: int = 0, error: BaseException | None = None,
               failed: bool = False) -> None:
        """End the span: an HTTP status (0: none), what was raised, or `failed`
        (an error status of another protocol's) mark it as failed."""
        span = self.span
        if span.is_recording():
            if status_code:
                span.set_attribute("http.response.status_code", status_code)
            if error is not None:
                span.record_exception(error)
            if error is not None or status_code >= 500 or failed:
                span.set_status(_api[0].Status(_api[0].StatusCode.ERROR))
        span.end()
        _api[1].detach(self.token)


def decide(trace_headers: Sequence[tuple[bytes, bytes]], *, roots: bool = True,
           marks: bool = True) -> bool:
    """Whether a request gets a span here (then call `serve_decided`). Not
    when tracing is off or its parent was not sampled (with a parent-based
    sampler), nor when it would start a trace and `roots` is False (the hop
    before decided: module docstring) or a ratio sampler does not sample
    it: then its trace headers are kept to be passed on, as they came, and
    with `marks` a new trace's unsampled `traceparent` first. Hot paths ask
    this before they build a span's name and attributes."""
    if TRACER is None or (_parent_based and _unsampled(trace_headers)):
        PASSED.set(tuple(trace_headers))
        _SAMPLED.set(False)
        return False
    if (_root_bound is not None or not roots) and not _names_parent(trace_headers):
        if not roots or _root_bound is None:  # a trace would start here, and the
            PASSED.set(tuple(trace_headers))  # hop before chose not to sample it
            _SAMPLED.set(False)
            return False
        trace_id = random.getrandbits(128) or 1
        if trace_id & _LOW_64 >= _root_bound:  # TraceIdRatioBased's test: not sampled
            PASSED.set(((TRACEPARENT_HEADER, b"00-%032x-%016x-00" % (
                trace_id, random.getrandbits(64) or 1)), *trace_headers) if marks
                else tuple(trace_headers))
            _SAMPLED.set(False)
            return False
        _preset.next_trace_id = trace_id  # sampled: the SDK's decision is the same
    return True


def _names_parent(trace_headers: Sequence[tuple[bytes, bytes]]) -> bool:
    return any(k == TRACEPARENT_HEADER for k, _ in trace_headers) and \
        _parent(trace_headers) is not None


def serve(name: str, trace_headers: Sequence[tuple[bytes, bytes]],
          attributes: dict[str, Any], *, roots: bool = True,
          marks: bool = True) -> Served | None:
    """When on: a SERVER span, child of the trace the headers name (a new
    trace without them), made current until `finish`. None when `decide`
    (which `roots` and `marks` go to) says no span."""
    if not decide(trace_headers, roots=roots, marks=marks):
        return None
    return serve_decided(name, trace_headers, attributes)


def serve_decided(name: str, trace_headers: Sequence[tuple[bytes, bytes]],
                  attributes: dict[str, Any]) -> Served | None:
    """`serve` after `decide` said yes."""
    parent = _parent(trace_headers) if trace_headers else None
    span = TRACER.start_span(name, context=parent, kind=_api[0].SpanKind.SERVER,
                             attributes=_attributes(attributes))
    if not span.is_recording():  # not sampled: the hops this request makes say so
        ids = span.get_span_context()
        PASSED.set(((TRACEPARENT_HEADER, b"00-%032x-%016x-%02x" % (
            ids.trace_id, ids.span_id, ids.trace_flags)),
            *((k, v) for k, v in trace_headers if k != TRACEPARENT_HEADER)))
        _SAMPLED.set(False)
        return None
    _SAMPLED.set(True)
    return Served(span, _api[1].attach(_api[0].set_span_in_context(span, parent)))


def _unsampled(trace_headers: Sequence[tuple[bytes, bytes]]) -> bool:
    """Whether the headers carry a valid traceparent whose sampled flag is off."""
    for key, value in trace_headers:
        if key == TRACEPARENT_HEADER:  # version 00 is 55 characters, the flags last
            return len(value) == 55 and value[:3] == b"00-" and value[-3:] in (b"-00", b"-02")
    return False


def child(name: str, attributes: dict[str, Any] | None = None, kind: str = "INTERNAL",
          start_ns: int | None = None, context: Any = None) -> Any:
    """A span under the current one (or `context`'s), not made current; None
    when off or when that one is not recorded (an unsampled trace)."""
    if TRACER is None or not _api[0].get_current_span(context).is_recording():
        return None
    return TRACER.start_span(name, context=context, kind=getattr(_api[0].SpanKind, kind),
                             attributes=_attributes(attributes or {}), start_time=start_ns)


def root(name: str, attributes: dict[str, Any] | None = None, kind: str = "INTERNAL") -> Any:
    """A span starting a trace of its own (the controller's actions); None when off."""
    if TRACER is None:
        return None
    return TRACER.start_span(name, context=_api[1].Context(),
                             kind=getattr(_api[0].SpanKind, kind),
                             attributes=_attributes(attributes or {}))


def outside_request() -> bool:
    """Whether tracing is on and no request is being served here (a driver
    script's handle call, a task of user code's own): a handle call made
    now starts a trace of its own (`root`)."""
    return (TRACER is not None and _SAMPLED.get() is None
            and not _api[0].get_current_span().get_span_context().is_valid)


def current(span: Any) -> Any:
    """Make `span` current in this task (a token for `leave`); None when off or no span."""
    if span is None:
        return None
    return _api[1].attach(_api[0].set_span_in_context(span))


def leave(token: Any) -> None:
    if token is not None:
        _api[1].detach(token)


def capture() -> Any:
    """What a handle call made now carries: the current OpenTelemetry context
    (on) or the trace headers passed on (off)."""
    if not recording():
        return PASSED.get()
    return _api[1].get_current()


def adopt(captured: Any) -> Any:
    """Make a `capture()`d envelope current in this task; a token for `leave`."""
    if isinstance(captured, tuple):
        PASSED.set(captured)
        _SAMPLED.set(False)
        return None
    _SAMPLED.set(None)  # the captured context says (a user's own span, say)
    return _api[1].attach(captured)


def hop_headers(span: Any) -> list[tuple[bytes, bytes]]:
    """The trace headers for a hop made by `span` (an attempt); with tracing
    off (span None) the ones that came in, passed on."""
    if span is None:
        return list(PASSED.get())
    ids = span.get_span_context()
    hop = [(TRACEPARENT_HEADER, b"00-%032x-%016x-%02x" % (ids.trace_id, ids.span_id,
                                                          ids.trace_flags))]
    if ids.trace_state:
        hop.append((TRACESTATE_HEADER, ids.trace_state.to_header().encode("latin-1")))
    return hop


def end(span: Any, error: BaseException | None = None,
        attributes: dict[str, Any] | None = None) -> None:
    """End a span from `child` (None: nothing), with attributes and an error."""
    if span is None:
        return
    if span.is_recording():
        for key, value in (attributes or {}).items():
            if value != "" and value is not None:
                span.set_attribute(key, value)
        if error is not None:
            span.record_exception(error)
            span.set_status(_api[0].Status(_api[0].StatusCode.ERROR, type(error).__name__))
    span.end()


def _attributes(given: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v != "" and v is not None}


@contextlib.contextmanager
def made_current(span: Any) -> Iterator[Any]:
    """`span` current while the block runs, then ended (with what the block
    raised); a None span (tracing off, unsampled) does nothing."""
    token = current(span)
    error: Exception | None = None
    try:
        yield span
    except Exception as e:
        error = e
        raise
    finally:
        leave(token)
        end(span, error)


def action(name: str, attributes: dict[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """A trace of its own, current while the block runs (the controller's
    actions: a deploy, a replica started or stopped); nothing when off."""
    return made_current(root(name, attributes))
