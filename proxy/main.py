"""The proxy process: `servefleet proxy --controller ADDR[,ADDR...] --listen HOST:PORT`.

It watches the route table and every replica set from the leader (one
WatchClient, announcing itself as a proxy with its address) and serves HTTP
with uvicorn. With no controller reachable it keeps serving the last routes
and replicas it was sent. On SIGTERM/SIGINT it drains: /-/healthz turns 503,
the listener closes, in-flight requests finish (up to --drain-timeout-s),
and it exits; a second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import uuid

from servefleet.dataplane.load_report import LoadReporter
from servefleet.dataplane.upstream import UpstreamPool
from servefleet.lifecycle import notify_ready, on_stop_signals, start_http_server
from servefleet.security.tls import Credentials
from servefleet.v1 import watch_pb2
from servefleet.watch_client import WatchClient
from servefleet.wire import ROUTES_KEY, replicas_key

from .app import MAX_HEADER_BYTES, ProxyApp
from .state import ProxyState

logger = logging.getLogger("servefleet.proxy")


async def serve(controllers: str, listen: str, request_timeout_s: float | None,
                drain_timeout_s: float = 30.0, advertise: str | None = None,
                credentials: Credentials | None = None,
                max_header_bytes: int = MAX_HEADER_BYTES) -> None:
    host, _, port = listen.rpartition(":")
    upstream = UpstreamPool()
    state = ProxyState(upstream)
    try:
        app = ProxyApp(state.replica_sets.get, lambda: state.routes, upstream,
                       request_timeout_s, max_header_bytes)
        # The replica's date and server headers are passed through; the proxy adds none.
        server = await start_http_server(app, host, int(port), date_header=False,
                                         server_header=False,
                                         timeout_graceful_shutdown=int(drain_timeout_s))
        address = advertise or (listen if host not in ("0.0.0.0", "::", "")
                                else f"{socket.gethostname()}:{port}")
        watcher = WatchClient(controllers, [ROUTES_KEY, replicas_key()], on_snapshot=state.apply,
                              kind=watch_pb2.WATCHER_KIND_PROXY, address=address,
                              watcher_id=f"proxy-{uuid.uuid4().hex[:8]}",
                              credentials=credentials)
        reporter = LoadReporter(watcher)
        state.replica_sets.on_starved = reporter.wake
        watcher.start()
        reporting = asyncio.create_task(reporter.run(state.replica_sets))
        logger.info("proxy %s listening on %s, watching %s", watcher.watcher_id, listen,
                    controllers)
        notify_ready(f"proxy listening on {listen}")
        stop = asyncio.Event()
        on_stop_signals(stop.set)
        await stop.wait()
        logger.info("draining")
        app.draining = True
        await server.shutdown()
        reporting.cancel()
        await watcher.close()
    finally:
        upstream.close()
    logger.info("proxy stopped")
