"""Turning tracing on in a process (servefleet/_private/tracing/sdk.py): what
asks for it, what a missing or broken SDK install says, spans lost on export
counted, and the OTLP exporters chosen by OpenTelemetry's variables."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider

from servefleet._private.tracing import sdk as tracing_setup


def test_what_turns_tracing_on(monkeypatch) -> None:
    for key in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", tracing_setup.ENV_TRACING):
        monkeypatch.delenv(key, raising=False)
    assert not tracing_setup.wanted()
    assert tracing_setup.wanted(flag=True)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    assert tracing_setup.wanted()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not tracing_setup.wanted(flag=True)
    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing_setup.wanted()


def test_spans_an_export_lost_and_spans_past_the_queue_are_counted() -> None:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Unreachable(SpanExporter):
        def export(self, spans):
            time.sleep(0.2)  # a collector that does not answer, until the timeout
            return SpanExportResult.FAILURE

    def dropped(reason: str) -> float:
        return tracing_setup.DROPPED.labels(reason)._value.get()

    failed, full = dropped("export_failed"), dropped("queue_full")
    processor = tracing_setup._processor(Unreachable())
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for _ in range(3000):  # past the default queue of 2048, exported in the background
        tracer.start_span("s").end()
    processor.force_flush()
    assert dropped("queue_full") > full
    assert dropped("export_failed") > failed
    threading.Thread(target=provider.shutdown, daemon=True).start()


def test_tracing_asked_for_without_the_sdk_says_what_to_install() -> None:
    # The SDK made unimportable in a fresh interpreter: what a user without
    # servefleet[tracing] sees, a message and exit 2, no traceback.
    code = ("import sys; sys.modules['opentelemetry.sdk'] = None; "
            "from servefleet._private.cli.main import main; "
            "sys.exit(main(['--tracing', 'proxy', '--controller', '127.0.0.1:1']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done.stderr
    assert "pip install 'servefleet[tracing]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_exporter_broken_by_overwritten_proto_files_says_how_to_repair_it() -> None:
    # What a clean CI install hit: xds-protos' older opentelemetry/proto/
    # files installed over opentelemetry-proto's, and the exporter's import
    # failed on a message only the newer files have.
    broken = ImportError("cannot import name 'InstrumentationScope' from "
                         "'opentelemetry.proto.common.v1.common_pb2'")
    assert "--force-reinstall opentelemetry-proto" in tracing_setup._import_hint(broken)
    missing = ImportError("No module named 'opentelemetry.sdk'")
    assert tracing_setup._import_hint(missing) == tracing_setup.INSTALL_HINT


def test_the_installed_otlp_exporters_import() -> None:
    # The test extra installs both exporters; the setup script must leave
    # them importable whatever order pip installed xds-protos in.
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as G
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as H
    assert G.__module__ != H.__module__


def test_spans_go_over_otlp_http_when_the_variables_say_so(monkeypatch) -> None:
    import http.server

    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    names: list[str] = []

    class Collector(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            names.extend(s.name for r in request.resource_spans for ss in r.scope_spans
                         for s in ss.spans)
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT",
                       f"http://127.0.0.1:{server.server_address[1]}")
    provider = tracing_setup._provider("proxy", {})
    try:
        provider.get_tracer("t").start_span("over http").end()
        provider.force_flush()
        assert names == ["over http"]
        assert provider.resource.attributes["service.name"] == "servefleet-proxy"
    finally:
        provider.shutdown()
        server.shutdown()
        server.server_close()
