"""The proxy process: `servefleet proxy --controller ADDR[,ADDR...] --listen HOST:PORT`.

It watches the route table and every replica set from the leader (one
WatchClient, announcing itself as a proxy with its address) and serves HTTP
with uvicorn. With no controller reachable it keeps serving the last routes
and replicas it was sent. On SIGTERM/SIGINT it drains: /-/healthz turns 503,
the listener closes, in-flight requests finish (up to --drain-timeout-s),
and it exits; a second signal exits at once. What one client may hold of it
(head sizes and times, idle and open connections) is edge.py's.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import uuid
from dataclasses import dataclass, field, replace

from servefleet._private.dataplane.grpc_forward import GrpcChannels
from servefleet._private.dataplane.load_report import LoadReporter
from servefleet._private.dataplane.metrics import publish_pools
from servefleet._private.dataplane.router_loader import RouterLoader, allow_modules
from servefleet._private.dataplane.upstream import UpstreamPool
from servefleet._private.edge.limits import connection_cap
from servefleet._private.lifecycle import (
    notify_ready,
    on_stop_signals,
    raise_open_file_limit,
    start_http_server,
)
from servefleet._private.observability import loop_metrics
from servefleet._private.security.hop_client import HOP_PASS
from servefleet._private.security.hop_tls import client_context
from servefleet._private.security.tls import Credentials
from servefleet._private.security.tokens import TokenFile
from servefleet._private.watch_client import WatchClient
from servefleet._private.wire import ROUTES_KEY, replicas_key
from servefleet.v1 import watch_pb2

from .access import AdminAccess
from .app import ProxyApp
from .edge import HeadClock
from .forwarded import DEFAULT_TRUSTED, Forwarded
from .grpc_ingress import GrpcProxy, start_grpc_ingress
from .haproxy import DEFAULT_BUFFER_BYTES
from .haproxy.front import BehindEngine, HaproxyFront
from .haproxy.process import HaproxyError
from .limits import EdgeLimits
from .routes import DEFAULT_ANSWER_START_S
from .state import ProxyState

logger = logging.getLogger("servefleet.proxy")


@dataclass
class ProxyOptions:
    """Settings of one proxy process (`servefleet proxy` flags)."""

    # Controller addresses, comma-separated.
    controllers: str
    # HOST:PORT the HTTP ingress binds.
    listen: str
    # Seconds before 504; None: the cluster's http_options.request_timeout_s.
    request_timeout_s: float | None = None
    # Without either, how long a request waits for its answer to begin.
    answer_start_timeout_s: float = DEFAULT_ANSWER_START_S
    # Seconds in-flight requests get to finish on SIGTERM.
    drain_timeout_s: float = 30.0
    # The address announced to the controller (default: `listen`).
    advertise: str | None = None
    # The proxy's identity towards the controllers (mutual TLS), or None: from the env.
    credentials: Credentials | None = None
    # Head sizes and times, idle and open connections (edge.py); with
    # max_connections None, derived from the open-file limit (edge_limits.connection_cap).
    limits: EdgeLimits = field(default_factory=EdgeLimits)
    # Who may read /-/routes and /-/metrics: loopback, token or public (access.py).
    admin_paths: str = "loopback"
    # HTTPS on the ingress: PEM certificate chain and key. None: plain HTTP.
    tls_cert: str | None = None
    tls_key: str | None = None
    # Bearer tokens for applications with require_token (reread on SIGHUP).
    http_tokens: str | None = None
    # Log one line per routed request (method, path, status, time, request id).
    access_log: bool = False
    # Count requests per deployment (/-/metrics, traffic in GetStatus).
    metrics: bool = True
    # HOST:PORT of the gRPC ingress (grpc_ingress.py); None: no gRPC.
    grpc_listen: str | None = None
    # Eject replicas that hang and send the GETs they hold elsewhere (balancer.py).
    passive_health: bool = True
    # This process's number among `--workers` (workers.py), or None: the only proxy.
    worker: int | None = None
    # Close a WebSocket after this long without a message either way (0: never).
    websocket_idle_timeout_s: float = 0.0
    # Peers whose x-forwarded-proto is kept (forwarded.py): addresses, networks or *.
    forwarded_allow_ips: str = DEFAULT_TRUSTED
    # Modules (name prefixes) whose RequestRouter classes deployments may name
    # here; servefleet's own routers are always available (routers.py).
    router_modules: tuple[str, ...] = ()
    # Who serves the HTTP port: "python" (this process), or "haproxy" (a child
    # HAProxy this process drives, with the Python app behind it: haproxy/).
    engine: str = "python"
    # HAProxy's threads (0: one per CPU) and buffer; with the haproxy engine only.
    engine_threads: int = 0
    engine_buffer_bytes: int = DEFAULT_BUFFER_BYTES


def front_of(options: ProxyOptions, state: ProxyState, limits: EdgeLimits,
             app: ProxyApp) -> HaproxyFront:
    """HAProxy in front of this process's app (--engine haproxy)."""
    return HaproxyFront(
        state, options.listen, limits, lambda: options.request_timeout_s or
        state.routes.request_timeout_s or options.answer_start_timeout_s,
        trusted=options.forwarded_allow_ips, drain_timeout_s=options.drain_timeout_s,
        tls_cert=options.tls_cert, tls_key=options.tls_key, threads=options.engine_threads,
        buffer_bytes=options.engine_buffer_bytes,
        websocket_idle_timeout_s=options.websocket_idle_timeout_s,
        errors=app.metrics.errors, access_log=options.access_log)


async def serve(options: ProxyOptions) -> None:
    """Run a proxy until SIGTERM/SIGINT; OSError when it cannot listen,
    TokenFileError for an --http-tokens file that does not parse."""
    host, _, port = options.listen.rpartition(":")
    tokens = TokenFile(options.http_tokens, "HTTP tokens")
    open_files = raise_open_file_limit()
    limits = options.limits
    if limits.max_connections is None:
        limits = replace(limits, max_connections=connection_cap(open_files))
    heads = HeadClock(limits)
    # Replicas that serve TLS are reached with this proxy's certificate (hop_tls.py).
    own = options.credentials.tls if options.credentials is not None else None
    upstream = UpstreamPool(tls=client_context(own) if own is not None else None)
    state = ProxyState(upstream, options.passive_health,
                       RouterLoader(allow_modules(options.router_modules)))
    front: HaproxyFront | None = None
    try:
        app = ProxyApp(state.replica_sets.get, lambda: state.routes, upstream,
                       options.request_timeout_s, lambda: tokens.table)
        app.first_sync = state
        app.admin = AdminAccess(options.admin_paths)
        app.access_log = options.access_log
        app.metrics_enabled = options.metrics
        app.websockets.idle_timeout_s = options.websocket_idle_timeout_s
        app.answer_start_s = app.websockets.answer_start_s = options.answer_start_timeout_s
        app.forwarded = Forwarded(options.forwarded_allow_ips)
        # The replica's date and server headers are passed through; the proxy adds none.
        # The client is the connection's peer: the proxy adds it to x-forwarded-for
        # (forwarded.py); uvicorn's own reading of those headers stays off.
        front = front_of(options, state, limits, app) if options.engine == "haproxy" else None
        if front is not None:  # the Python app serves behind HAProxy, on loopback
            app.more_metrics = front.metrics
            host, port = "127.0.0.1", "0"
        server = await start_http_server(BehindEngine(app) if front else app, host, int(port),
                                         date_header=False,
                                         proxy_headers=False, http=heads.protocol(),
                                         timeout_keep_alive=limits.keep_alive_timeout_s,
                                         reuse_port=options.worker is not None,
                                         server_header=False,
                                         timeout_graceful_shutdown=int(options.drain_timeout_s),
                                         ssl_certfile=None if front else options.tls_cert,
                                         ssl_keyfile=None if front else options.tls_key)
        if front is not None:
            try:
                await front.start(f"127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}")
            except HaproxyError as e:
                await server.shutdown()
                raise OSError(str(e)) from None
        grpc_server = checks = None
        if options.grpc_listen:
            channels = state.replica_sets.channels = GrpcChannels(own)
            grpc_proxy = GrpcProxy(state.replica_sets.get, lambda: state.routes, channels,
                                   options.request_timeout_s, lambda: tokens.table,
                                   app.metrics if options.metrics else None)
            grpc_proxy.answer_start_s = options.answer_start_timeout_s
            grpc_proxy.admin = app.admin  # ListApplications: as /-/routes
            grpc_proxy.first_sync = state
            try:
                grpc_server, checks = await start_grpc_ingress(
                    grpc_proxy, lambda: state.routes, options.grpc_listen,
                    options.tls_cert, options.tls_key, limits)
            except OSError:
                await server.shutdown()
                raise
        heads.start()
        host, _, port = options.listen.rpartition(":")
        address = options.advertise or (options.listen if host not in ("0.0.0.0", "::", "")
                                        else f"{socket.gethostname()}:{port}")
        watcher = WatchClient(options.controllers, [ROUTES_KEY, replicas_key()],
                              on_snapshot=front.apply if front else state.apply,
                              kind=watch_pb2.WATCHER_KIND_PROXY,
                              address=address, watcher_id=f"proxy-{uuid.uuid4().hex[:8]}" + (
                                  f"-w{options.worker}" if options.worker is not None else ""),
                              credentials=options.credentials)
        engine = front.engine if front else None
        reporter = LoadReporter(watcher, traffic=app.traffic, errors=app.metrics.errors.take,
                                engine=engine.load if engine else None,
                                applied=(lambda: engine.applied) if engine else None)
        state.replica_sets.on_starved = reporter.wake
        if engine is not None:
            engine.on_applied = reporter.wake
        else:
            state.replica_sets.on_applied = reporter.wake
        watcher.start()
        HOP_PASS.renew(watcher)  # what its requests show replicas of a cluster with credentials
        reporting = asyncio.create_task(reporter.run(state.replica_sets))
        publishing = asyncio.create_task(publish_pools()) if options.worker is not None \
            else None
        logger.info("proxy %s listening on %s (%s)%s, watching %s; at most %s client "
                    "connections (%d open files)", watcher.watcher_id, options.listen,
                    "HTTPS" if options.tls_cert else "HTTP",
                    f" and {options.grpc_listen} (gRPC)" if options.grpc_listen else "",
                    options.controllers, limits.max_connections or "unlimited", open_files)
        notify_ready(f"proxy listening on {options.listen}")
        stop = asyncio.Event()
        on_stop_signals(stop.set)
        loop_metrics.watch()
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, tokens.reload)
        await stop.wait()
        logger.info("draining")
        app.draining = True
        reporter.leave()  # no drain of a replica waits for this proxy now
        await app.websockets.close_all()  # 1001 now, not uvicorn's 1012 at its shutdown
        if front is not None:  # HAProxy first: what it holds may be on the Python path
            await front.stop()
        if grpc_server is not None and checks is not None:
            grpc_proxy.draining = True
            await checks.enter_graceful_shutdown()  # health: NOT_SERVING
            stopped = asyncio.ensure_future(grpc_server.stop(options.drain_timeout_s))
        await server.shutdown()
        heads.stop()
        if grpc_server is not None:
            await stopped
            await channels.close()
        reporting.cancel()
        if publishing is not None:
            publishing.cancel()
        await watcher.close()
    finally:
        upstream.close()
        if front is not None:
            front.process.kill()  # idempotent: after a clean stop, nothing is left
    logger.info("proxy stopped")
