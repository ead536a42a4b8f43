#!/usr/bin/env python3
"""One request's trace through the compose example, printed as a tree.

    .venv/bin/python scripts/trace_demo.py

Starts a controller (sqlite, process runtime) and a proxy on loopback with
tracing on, exporting to an OTLP receiver in this process (the gRPC
TraceService a collector speaks), deploys examples/compose.py (Front calls
WordCounter twice through a handle), sends one request and prints the spans
of its trace: service, span, duration and the attributes that place it.
docs/observability.md shows its output. Point OTEL_EXPORTER_OTLP_ENDPOINT at
a real collector (Jaeger, Tempo, the OpenTelemetry Collector) to see the
same trace there.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for  # noqa: E402
from servefleet._private.tracing.otlp_sink import OtlpSink, ReceivedSpan  # noqa: E402
from servefleet.client import ControllerClient  # noqa: E402
from servefleet.v1 import application_pb2 as apb  # noqa: E402
from servefleet.v1 import deployment_pb2 as dpb  # noqa: E402
from servefleet.v1 import status_pb2  # noqa: E402

SHOWN = ("servefleet.replica", "servefleet.attempt", "servefleet.retry.reason",
         "http.response.status_code", "servefleet.queued_s")


def _short(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def tree(spans: list[ReceivedSpan]) -> list[str]:
    """The spans as indented lines, children in start order under their parent."""
    children: dict[str, list[ReceivedSpan]] = {}
    ids = {s.span_id for s in spans}
    for span in sorted(spans, key=lambda s: s.start_ns):
        children.setdefault(span.parent_id if span.parent_id in ids else "", []).append(span)
    lines: list[str] = []

    def walk(parent: str, depth: int) -> None:
        for span in children.get(parent, []):
            shown = ", ".join(f"{k.split('.')[-1]}={_short(span.attributes[k])}"
                              for k in SHOWN if k in span.attributes)
            ms = (span.end_ns - span.start_ns) / 1e6
            lines.append(f"{'  ' * depth}{span.service:<18} {span.name:<28} {ms:7.2f} ms"
                         + (f"  {shown}" if shown else ""))
            walk(span.span_id, depth + 1)

    walk("", 0)
    return lines


def main() -> None:
    sink = OtlpSink().start()
    os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint,
                       "OTEL_BSP_SCHEDULE_DELAY": "100"})
    work = tempfile.mkdtemp(prefix="servefleet-trace-")
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work).start()
    proxy = ProxyProcess([controller.address], log_dir=work).start()
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy_applications([apb.ApplicationSpec(
            name="compose", import_path="compose:app", route_prefix="/compose",
            runtime=dpb.RuntimeOptions(working_dir=str(ROOT / "examples")))])
        wait_for(lambda: (info := client.application_status("compose")) is not None
                 and info.status == status_pb2.APPLICATION_STATUS_RUNNING, 120, "RUNNING")
        url = f"{proxy.url}/compose"
        wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
        trace_id = os.urandom(16).hex()
        reply = httpx.get(url, params={"text": "the cat and the hat"}, timeout=30, headers={
            "traceparent": f"00-{trace_id}-{os.urandom(8).hex()}-01"})
        print(f"$ curl -H 'traceparent: 00-{trace_id}-...-01' "
              f"'{url}?text=the+cat+and+the+hat'\n{reply.text}\n")
        spans = [s for s in sink.wait_for(lambda got: sum(
            s.trace_id == trace_id and s.kind == "SERVER" for s in got) >= 4)
            if s.trace_id == trace_id]
        print(f"trace {trace_id}: {len(spans)} spans")
        print("\n".join(tree(spans)))
    finally:
        proxy.stop()
        client.shutdown()
        client.close()
        controller.stop()
        sink.stop()


if __name__ == "__main__":
    main()
