"""An OTLP trace receiver for tests and benchmarks: the gRPC `TraceService`
collectors speak (from opentelemetry-proto), on a loopback port, keeping
what it receives in memory.

    sink = OtlpSink().start()
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink.endpoint
    ...
    spans = sink.wait_for(lambda spans: len(spans) >= 3)

Each span is a `ReceivedSpan`: names, ids as hex, kind, attributes and
the service.name of the process that sent it. `count_only=True` keeps only
the number of spans (a benchmark at 100% sampling).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER",
         5: "CONSUMER"}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    start_ns: int = 0
    end_ns: int = 0
    error: bool = False


def _value(any_value: Any) -> Any:
    which = any_value.WhichOneof("value")
    return getattr(any_value, which) if which else None


def _spans(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    out = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(ReceivedSpan(
                    span.name, span.trace_id.hex(), span.span_id.hex(),
                    span.parent_span_id.hex(), KINDS.get(span.kind, str(span.kind)),
                    str(resource.get("service.name", "")),
                    {a.key: _value(a.value) for a in span.attributes},
                    span.start_time_unix_nano, span.end_time_unix_nano,
                    span.status.code == 2))
    return out


class OtlpSink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, count_only: bool = False) -> None:
        self.count_only = count_only
        self.received = 0
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Condition()
        self._server: grpc.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> OtlpSink:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, server)
        self.port = server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None

    def Export(self, request: Any, context: Any) -> Any:
        spans = _spans(request)
        with self._lock:
            self.received += len(spans)
            if not self.count_only:
                self._spans.extend(spans)
            self._lock.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool],
                 timeout: float = 30.0) -> list[ReceivedSpan]:
        """The spans received, once `done(spans)` holds; TimeoutError naming
        what did arrive otherwise."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while not done(list(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({f"{s.service}:{s.name}" for s in self._spans})
                    raise TimeoutError(f"spans not as awaited after {timeout}s; got {names}")
                self._lock.wait(left)
            return list(self._spans)
