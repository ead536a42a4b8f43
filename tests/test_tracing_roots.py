"""Where traces start (servefleet/_private/tracing/spans.py): at the proxy, which
sends what it did not sample on to a replica's HTTP port with no trace
headers; never at a replica's HTTP port; at a handle call made outside any
request. Unit tests with the OpenTelemetry SDK in this process."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, TraceIdRatioBased

from servefleet._private import envelope
from servefleet._private.tracing import sdk as tracing_setup
from servefleet._private.tracing import spans as tracing

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _install(rate: float | None) -> InMemorySpanExporter:
    """Tracing on with a ratio sampler (as tracing_setup installs it), or
    always on for None."""
    exporter = InMemorySpanExporter()
    sampler = ParentBased(TraceIdRatioBased(rate) if rate is not None else ALWAYS_ON)
    provider = TracerProvider(sampler=sampler, id_generator=tracing_setup._preset_ids())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider.get_tracer("t"), True,
                    TraceIdRatioBased.get_bound_for_rate(rate) if rate is not None else None,
                    provider.id_generator)
    return exporter


@pytest.fixture
def ratio() -> Iterator[None]:
    _install(0.5)
    yield
    tracing.uninstall()


def _in_fresh_context(fn):
    return contextvars.Context().run(fn)


def test_what_a_proxy_did_not_sample_goes_on_without_trace_headers(ratio) -> None:
    unsampled = 0
    for _ in range(200):
        def first_hop() -> tuple[bool, tuple]:
            return tracing.decide([], marks=False), tracing.PASSED.get()
        sampled, passed = _in_fresh_context(first_hop)
        if not sampled:
            unsampled += 1
            assert passed == ()
    assert 50 < unsampled < 150
    # Marking (the gRPC ingress's hops) sends the decision on instead.
    marked = [_in_fresh_context(lambda: (tracing.decide([]), tracing.PASSED.get()))
              for _ in range(200)]
    assert all(dict(p)[b"traceparent"].endswith(b"-00") for s, p in marked if not s)


def test_a_replicas_http_port_starts_no_trace_but_continues_one() -> None:
    _install(None)  # a sampler that would sample every trace started
    try:
        assert _in_fresh_context(lambda: tracing.decide([], roots=False)) is False
        assert _in_fresh_context(
            lambda: tracing.decide([(b"traceparent", PARENT.encode())], roots=False))
        # A client's own unsampled context is still passed on as it came.
        unsampled = (b"traceparent", PARENT[:-2].encode() + b"00")
        assert _in_fresh_context(lambda: (tracing.decide([unsampled], roots=False),
                                          tracing.PASSED.get())) == (False, (unsampled,))
    finally:
        tracing.uninstall()


async def test_a_handle_call_outside_any_request_starts_a_trace() -> None:
    spans = _install(None)
    try:
        async def driver_call() -> list[tuple[bytes, bytes]]:
            carried = envelope.Carried()  # a driver script: nothing is being served
            with carried.entered("call Model.__call__", {"servefleet.deployment": "Model"}):
                return tracing.hop_headers(tracing.child("send to replica"))

        headers = await asyncio.create_task(driver_call(), context=contextvars.Context())
        (call,) = [s for s in spans.get_finished_spans() if s.name == "call Model.__call__"]
        assert call.parent is None
        assert dict(headers)[b"traceparent"].decode().split("-")[1] == \
            f"{call.context.trace_id:032x}"
        # Inside a request the call is the request's child, not a root.
        def in_request() -> bool:
            tracing.serve("GET /", [(b"traceparent", PARENT.encode())], {})
            return envelope.Carried().starts_trace
        assert _in_fresh_context(in_request) is False
    finally:
        tracing.uninstall()
