"""servefleet's spans in one process (servefleet/_private/tracing/spans.py), with the
OpenTelemetry SDK exporting to memory: the attempts of a forwarded request
(retries and queue waits included) and the trace context each hop sends;
sampling decided once at a request's first hop; the envelope a handle call
carries across threads; trace ids in JSON log lines."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
from collections.abc import AsyncIterator, Iterator

import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from servefleet._private import envelope
from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.dataplane.forward import forward
from servefleet._private.dataplane.upstream import Response, UpstreamPool
from servefleet._private.observability import logs
from servefleet._private.tracing import sdk as tracing_setup
from servefleet._private.tracing import spans as tracing

REJECTED = b"HTTP/1.1 503 Service Unavailable\r\nx-servefleet-rejected: draining\r\n" \
           b"content-length: 0\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider.get_tracer("test"))
    yield exporter
    tracing.uninstall()


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool()
    yield pool
    pool.close()


class _Replica:
    """A loopback server answering every request with `answer`, keeping the heads."""

    def __init__(self, server: asyncio.Server, writers: list[asyncio.StreamWriter]) -> None:
        self.server, self.writers = server, writers

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.server.close()


async def _replica(answer: bytes, heads: list[bytes]) -> tuple[_Replica, str]:
    writers: list[asyncio.StreamWriter] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                heads.append(head.lower())
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    return _Replica(server, writers), f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


def _traceparent(head: bytes) -> str:
    return next(line.split(b": ")[1].decode() for line in head.split(b"\r\n")
                if line.startswith(b"traceparent:"))


async def _status(response: Response) -> int:
    await response.read()
    return response.status


async def test_each_attempt_is_a_span_and_sends_its_own_traceparent(spans, upstream) -> None:
    refused_heads: list[bytes] = []
    ok_heads: list[bytes] = []
    refusing, refusing_at = await _replica(REJECTED, refused_heads)
    taking, taking_at = await _replica(OK, ok_heads)
    pool = ReplicaPool()
    pool.update([("r0", refusing_at), ("r1", taking_at)], max_ongoing=5, max_queued=-1)
    pool.replicas["r1"].in_flight = 4  # busier: power of two picks r0 first, then r1
    served = tracing.serve("POST /x", [(b"traceparent", PARENT.encode())], {"a": "b"})
    assert served is not None
    try:
        status = await asyncio.wait_for(
            forward(pool, upstream, "POST", b"/x", [], b"{}", _status), 5)
    finally:
        served.finish(200)
        upstream.close()
        refusing.close()
        taking.close()
        await asyncio.sleep(0)
    assert status == 200
    finished: dict[str, list] = {}
    for s in spans.get_finished_spans():
        finished.setdefault(s.name, []).append(s)
    root = finished["POST /x"][0]
    assert f"{root.context.trace_id:032x}" == PARENT.split("-")[1]
    assert f"{root.parent.span_id:016x}" == PARENT.split("-")[2]  # the client's span
    attempts = finished["send to replica"]
    assert [a.attributes["servefleet.replica"] for a in attempts] == ["r0", "r1"]
    assert attempts[0].attributes["servefleet.retry.reason"] == "draining"
    assert "servefleet.retry.reason" not in attempts[1].attributes
    assert attempts[1].attributes["http.response.status_code"] == 200
    assert all(a.parent.span_id == root.context.span_id for a in attempts)
    # Each replica was told of its own attempt's span as the parent.
    for head, attempt in ((refused_heads[0], attempts[0]), (ok_heads[0], attempts[1])):
        assert _traceparent(head) == (f"00-{attempt.context.trace_id:032x}-"
                                      f"{attempt.context.span_id:016x}-01")


async def test_a_request_that_waits_for_room_has_a_queue_span(spans, upstream) -> None:
    heads: list[bytes] = []
    server, address = await _replica(OK, heads)
    pool = ReplicaPool()
    pool.update([("r0", address)], max_ongoing=1, max_queued=-1)
    busy = await pool.acquire()
    served = tracing.serve("GET /q", [], {})
    try:
        task = asyncio.create_task(forward(pool, upstream, "GET", b"/q", [], b"", _status))
        await asyncio.sleep(0.05)
        pool.release(busy)
        assert await asyncio.wait_for(task, 5) == 200
    finally:
        served.finish(200)
        upstream.close()
        server.close()
        await asyncio.sleep(0)
    queue = [s for s in spans.get_finished_spans() if s.name == "queue"]
    assert len(queue) == 1
    assert (queue[0].end_time - queue[0].start_time) / 1e9 >= 0.04


async def test_no_span_and_the_headers_passed_on_when_tracing_is_off(upstream) -> None:
    heads: list[bytes] = []
    server, address = await _replica(OK, heads)
    pool = ReplicaPool()
    pool.update([("r0", address)], max_ongoing=1, max_queued=-1)
    assert tracing.serve("GET /", [(b"traceparent", PARENT.encode())], {}) is None
    try:
        assert await forward(pool, upstream, "GET", b"/", [], b"", _status) == 200
    finally:
        upstream.close()
        server.close()
        await asyncio.sleep(0)
    assert _traceparent(heads[0]) == PARENT  # a hop without tracing cuts no trace


def test_an_unsampled_parent_costs_no_span_and_is_passed_on(spans) -> None:
    unsampled = PARENT[:-2] + "00"
    assert tracing.serve("GET /", [(b"traceparent", unsampled.encode())], {}) is None
    assert tracing.PASSED.get() == ((b"traceparent", unsampled.encode()),)
    assert spans.get_finished_spans() == ()


def test_a_ratio_sampler_is_decided_at_the_first_hop_as_the_sdk_decides() -> None:
    exporter = InMemorySpanExporter()
    rate = 0.25
    provider = TracerProvider(sampler=ParentBased(TraceIdRatioBased(rate)),
                              id_generator=tracing_setup._preset_ids())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider.get_tracer("t"), True,
                    TraceIdRatioBased.get_bound_for_rate(rate), provider.id_generator)
    try:
        sampled = 0
        for _ in range(2000):
            served = tracing.serve("GET /", [], {})
            if served is None:
                header = dict(tracing.PASSED.get())[b"traceparent"]
                assert header.endswith(b"-00") and len(header) == 55
            else:
                sampled += 1
                ids = served.span.get_span_context()
                # The id it was sampled by is the one the SDK's sampler saw.
                assert ids.trace_id & (2**64 - 1) < TraceIdRatioBased.get_bound_for_rate(rate)
                served.finish(200)
        assert 350 < sampled < 650  # 500 expected
        assert len(exporter.get_finished_spans()) == sampled
    finally:
        tracing.uninstall()


async def test_a_handle_call_carries_the_request_id_and_trace_across_threads(spans) -> None:
    served = tracing.serve("GET /", [], {})
    logs.REQUEST_ID.set("req-1")
    loop = asyncio.get_running_loop()
    seen_ids: list[str] = []
    seen_headers: list[tuple[bytes, bytes]] = []
    done = threading.Event()

    def user_thread() -> None:  # sync user code calling a handle
        carried = envelope.Carried()

        async def call() -> None:
            with carried.entered("call Next.__call__", {"servefleet.deployment": "Next"}):
                seen_ids.append(logs.REQUEST_ID.get())
                seen_headers.extend(tracing.hop_headers(tracing.child("send to replica")))
            done.set()

        # The call runs on the loop in a context that knows nothing of the
        # request (the replica's loop, or handle_loop's private one).
        loop.call_soon_threadsafe(lambda: loop.create_task(call()),
                                  context=contextvars.Context())
        assert done.wait(5)

    # As a replica runs plain `def` code: in a thread, in the request's context.
    context = contextvars.copy_context()
    await loop.run_in_executor(None, lambda: context.run(user_thread))
    served.finish(200)
    assert seen_ids == ["req-1"]
    call_span = next(s for s in spans.get_finished_spans() if s.name == "call Next.__call__")
    assert call_span.parent.span_id == served.span.get_span_context().span_id
    assert dict(seen_headers)[b"traceparent"].decode().split("-")[1] == \
        f"{call_span.context.trace_id:032x}"


def test_json_log_lines_name_the_current_trace_and_span(spans) -> None:
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(self.format(record))

    handler = Keep()
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs._Context({"component": "test"}))
    logger = logging.getLogger("test_tracing.json")
    logger.addHandler(handler)
    try:
        with tracing.action("deploy", {}) as span:
            logger.warning("inside")
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(r) for r in records)
    ids = span.get_span_context()
    assert (inside["trace_id"], inside["span_id"]) == (f"{ids.trace_id:032x}",
                                                       f"{ids.span_id:016x}")
    assert "trace_id" not in outside


@pytest.mark.parametrize("value", [
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff: invalid
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # 00 has 4 fields
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",  # not hex
])
def test_a_malformed_traceparent_starts_a_new_trace(spans, value: str) -> None:
    served = tracing.serve("GET /", [(b"traceparent", value.encode())], {})
    assert served is not None
    served.finish(200)
    (root,) = spans.get_finished_spans()
    assert root.parent is None and f"{root.context.trace_id:032x}" not in value


def test_tracestate_is_kept_and_passed_on(spans) -> None:
    served = tracing.serve("GET /", [(b"traceparent", PARENT.encode()),
                                     (b"tracestate", b"vendor=abc,other=1")], {})
    assert served is not None
    hop = dict(tracing.hop_headers(tracing.child("send to replica")))
    served.finish(200)
    assert hop[b"tracestate"] == b"vendor=abc,other=1"
    assert hop[b"traceparent"].startswith(PARENT[:36].encode())  # the same trace
    # A later version's traceparent may carry more fields: its first four are read.
    later = PARENT.replace("00-", "01-", 1) + "-future"
    again = tracing.serve("GET /", [(b"traceparent", later.encode())], {})
    assert again is not None
    again.finish(200)
    assert f"{again.span.get_span_context().trace_id:032x}" == PARENT.split("-")[1]
