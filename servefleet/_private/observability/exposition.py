"""Serving a process's metrics: /metrics in Prometheus text format.

`metrics_app()` is the ASGI app a metrics port serves (replicas, the
controller); the proxy answers `/-/metrics` on its own HTTP port through
`render()`. Every process has one registry, prometheus_client's default:
servefleet's metrics are defined once per module, user metrics through
servefleet.metrics.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)

# No `_created` series beside every counter and histogram: a fifth fewer lines
# to render (a proxy with 1,000 deployments scrapes in a quarter less time).
disable_created_metrics()

# Latency buckets (seconds) for servefleet's own histograms: 0.5 ms to 60 s.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                   2.5, 5.0, 10.0, 30.0, 60.0)


def render() -> tuple[bytes, str]:
    """(body, content type) of this process's metrics; with
    PROMETHEUS_MULTIPROC_DIR set (a proxy among `--workers`), the sum over
    every process that writes there."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


async def send_body(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    """A whole ASGI response: the small HTTP servers' (metrics ports, the
    controller's HTTP face) one way to answer."""
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def send_metrics(send: Any, more: bytes = b"") -> None:
    """Answer with the metrics, rendered in a thread: at 1,000 deployments a
    proxy's take a few hundred ms of CPU, which must not stall its event loop.
    `more`: other families in the same text format, after this process's."""
    body, content_type = await asyncio.to_thread(render)
    await send_body(send, 200, body + more, content_type.encode())


async def metrics_app(scope: Any, receive: Any, send: Any) -> None:
    """ASGI: GET /metrics; 404 for anything else."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/metrics":
        await send_metrics(send)
        return
    await send_body(send, 404, b"servefleet metrics: GET /metrics\n", b"text/plain")
