"""`servefleet proxy`: run one HTTP (and gRPC) proxy (in the foreground)."""

from __future__ import annotations

import argparse
import os
import sys

from servefleet._private import lifecycle
from servefleet._private.security.tls import ENV_TOKEN
from servefleet._private.wire import DEFAULT_CONTROLLER, DEFAULT_HTTP, ENV_CONTROLLER
from servefleet.proxy.access import ADMIN_MODES
from servefleet.proxy.forwarded import DEFAULT_TRUSTED, Forwarded
from servefleet.proxy.haproxy import DEFAULT_BUFFER_BYTES, ENGINES
from servefleet.proxy.limits import EdgeLimits, add_edge_flags, edge_limits
from servefleet.proxy.routes import DEFAULT_ANSWER_START_S

from . import helptext, security
from .errors import EXIT_FAILED, UsageError


def _checked_limits(args: argparse.Namespace) -> EdgeLimits:
    """The edge limits of the flags; UsageError naming the first flag whose
    value cannot work."""
    host, sep, port = args.listen.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--listen {args.listen!r}: expected HOST:PORT")
    try:
        limits = edge_limits(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.admin_paths == "token" and not args.http_tokens:
        raise UsageError("--admin-paths token: needs --http-tokens FILE (the tokens to accept)")
    if args.request_timeout_s is not None and not args.request_timeout_s > 0:
        raise UsageError("--request-timeout-s: must be a positive number of seconds")
    if not 0 < args.answer_start_timeout_s < 1e9:
        raise UsageError("--answer-start-timeout-s: must be a positive number of seconds")
    if args.grpc_listen is not None:
        ghost, gsep, gport = args.grpc_listen.rpartition(":")
        if not gsep or not ghost or not gport.isdigit():
            raise UsageError(f"--grpc-listen {args.grpc_listen!r}: expected HOST:PORT")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    for flag, path in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)):
        if path and not os.path.isfile(path):
            raise UsageError(f"{flag} {path}: no such file")
    if not 1 <= args.workers <= 64:
        raise UsageError("--workers: between 1 and 64")
    if args.engine == "haproxy" and args.workers > 1:
        raise UsageError("--workers is for the python engine: HAProxy runs threads "
                         "(--engine-threads)")
    if not 0 <= args.engine_threads <= 64:
        raise UsageError("--engine-threads: between 0 (one per CPU) and 64")
    if not 4096 <= args.engine_buffer_bytes <= 1 << 20:
        raise UsageError("--engine-buffer-bytes: between 4096 and 1048576")
    if not 0 < args.drain_timeout_s <= 3600:
        raise UsageError("--drain-timeout-s: more than 0 and at most 3600 seconds")
    if not 0 <= args.websocket_idle_timeout_s < 1e9:
        raise UsageError("--websocket-idle-timeout-s: 0 (no limit) or more seconds")
    try:
        Forwarded(args.forwarded_allow_ips)
    except ValueError as e:
        raise UsageError(f"--forwarded-allow-ips: {e}") from None
    return limits


def advertised(advertise: str | None, listen: str) -> str | None:
    """--advertise as HOST:PORT (the port --listen's when it names none), or
    None without the flag; UsageError for a value that is not HOST[:PORT]."""
    if advertise is None:
        return None
    text = advertise.strip()
    if text.startswith("["):  # [fd00::5] or [fd00::5]:8000
        end = text.find("]") + 1
        host, rest = (text[:end], text[end:]) if end > 2 else ("", "")
        port = rest[1:] if rest.startswith(":") else ("?" if rest else "")
    elif text.count(":") > 1:  # a bare IPv6 address
        host, port = f"[{text}]", ""
    else:
        host, _, port = text.partition(":")
    port = port or listen.rpartition(":")[2]
    if not host or any(c.isspace() or c in "/@" for c in host) or not port.isdigit() \
            or not 0 < int(port) < 65536:
        raise UsageError(f"--advertise {advertise!r}: expected HOST or HOST:PORT (the address "
                         "the controllers list this proxy at, e.g. 10.0.0.7 or 10.0.0.7:8000)")
    return f"{host}:{port}"


def cmd_proxy(args: argparse.Namespace) -> int:
    from servefleet._private.security.tokens import TokenFileError
    from servefleet.proxy.main import ProxyOptions, serve
    from servefleet.proxy.workers import Supervisor, worker_index

    limits = _checked_limits(args)
    advertise = advertised(args.advertise, args.listen)
    credentials = security.proxy_credentials(args)
    worker = worker_index()
    if args.workers > 1 and worker is None:
        return Supervisor(args.argv, args.workers).run()
    options = ProxyOptions(
        worker=worker,
        controllers=args.controller or os.environ.get(ENV_CONTROLLER) or DEFAULT_CONTROLLER,
        listen=args.listen, request_timeout_s=args.request_timeout_s,
        drain_timeout_s=args.drain_timeout_s,
        answer_start_timeout_s=args.answer_start_timeout_s,
        advertise=advertise, credentials=credentials, limits=limits,
        admin_paths=args.admin_paths,
        tls_cert=args.tls_cert, tls_key=args.tls_key, http_tokens=args.http_tokens,
        access_log=args.access_log, metrics=args.metrics, grpc_listen=args.grpc_listen,
        passive_health=args.passive_health,
        websocket_idle_timeout_s=args.websocket_idle_timeout_s,
        forwarded_allow_ips=args.forwarded_allow_ips,
        router_modules=tuple(args.allow_router_module),
        engine=args.engine, engine_threads=args.engine_threads,
        engine_buffer_bytes=args.engine_buffer_bytes)
    try:
        lifecycle.run(serve(options))
    except TokenFileError as e:
        raise UsageError(f"--http-tokens: {e}") from None
    except OSError as e:
        print(f"servefleet proxy: {e}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def add_command(commands) -> None:
    proxy = helptext.add_command(
        commands, "proxy", help="run an HTTP (and gRPC) proxy",
        description="Run one proxy in the foreground: it watches the controllers for routes "
                    "and replicas and forwards HTTP requests (and, with --grpc-listen, gRPC "
                    "calls) to the replicas. Run as many as you like, behind a load "
                    "balancer; `servefleet up` runs one for you.",
        example=["# a proxy for two controllers, open to other hosts",
                 "servefleet proxy --controller 10.0.0.5:7373,10.0.0.6:7373 "
                 "--listen 0.0.0.0:8000",
                 "",
                 "# HTTPS with four processes on the port, and gRPC ingress on 9000",
                 "servefleet proxy --listen 0.0.0.0:8443 --tls-cert site.crt --tls-key site.key "
                 "--workers 4 --grpc-listen 0.0.0.0:9000",
                 "",
                 "# HAProxy serves the port (apt-get install haproxy)",
                 "servefleet proxy --engine haproxy --listen 0.0.0.0:8000"])
    proxy.add_argument("--controller", metavar="ADDR[,ADDR...]", default=None,
                       help=f"controller addresses (default: ${ENV_CONTROLLER}, "
                            f"else {DEFAULT_CONTROLLER})")
    proxy.add_argument("--listen", default=DEFAULT_HTTP, metavar="HOST:PORT",
                       help="where the proxy serves HTTP (default %(default)s)")
    proxy.add_argument("--advertise", default=None, metavar="HOST[:PORT]",
                       help="the address the controllers list this proxy at (its /-/metrics "
                            "scrape target, servefleet status), the port --listen's unless "
                            "given (default: --listen; when that binds every interface, this "
                            "host's name: in a Kubernetes Pod, give the Pod's IP)")
    proxy.add_argument("--engine", choices=ENGINES, default="python",
                       help="who serves the HTTP port: this process (python, every feature) "
                            "or a child HAProxy it drives, for throughput, with this process "
                            "behind it for what HAProxy does not do (haproxy; "
                            "docs/guides/haproxy.md) (default python)")
    proxy.add_argument("--engine-threads", type=int, default=0, metavar="N",
                       help="HAProxy's threads with --engine haproxy (default 0: one per CPU)")
    proxy.add_argument("--engine-buffer-bytes", type=int, default=DEFAULT_BUFFER_BYTES,
                       metavar="N",
                       help="HAProxy's buffer with --engine haproxy: a request's head must fit "
                            "in it, less 1 KiB, or gets 400 (a larger one costs CPU per "
                            "request; default %(default)s)")
    proxy.add_argument("--grpc-listen", default=None, metavar="HOST:PORT",
                       help="also serve gRPC ingress here: users' services, routed by the "
                            "'application' metadata key (default: none)")
    proxy.add_argument("--workers", type=int, default=1, metavar="N",
                       help="proxy processes sharing the port (SO_REUSEPORT), each with its "
                            "own Watch stream; /-/metrics sums them (default 1)")
    proxy.add_argument("--request-timeout-s", type=float, default=None, metavar="S",
                       help="answer 504 when a request takes longer, its answer's stream "
                            "included (default: the cluster's http_options.request_timeout_s)")
    proxy.add_argument("--answer-start-timeout-s", type=float, default=DEFAULT_ANSWER_START_S,
                       metavar="S",
                       help="without a request timeout, answer 504 (gRPC: "
                            "DEADLINE_EXCEEDED) when a request's answer has not begun within "
                            "this long; an answer that began is not cut (default 60)")
    proxy.add_argument("--drain-timeout-s", type=float, default=30.0, metavar="S",
                       help="on SIGTERM, how long requests and WebSockets in flight may take "
                            "to finish before they are cut (default 30)")
    add_edge_flags(proxy)
    proxy.add_argument("--admin-paths", choices=ADMIN_MODES, default="loopback",
                       help="who may read /-/routes and /-/metrics: loopback clients not "
                            "relayed by a local proxy, or any client with a bearer token of "
                            "--http-tokens (loopback, the default); token holders only "
                            "(token); anyone (public). /-/healthz is open to all")
    proxy.add_argument("--metrics", action=argparse.BooleanOptionalAction, default=True,
                       help="count requests for /-/metrics and the status's traffic figures "
                            "(default on)")
    proxy.add_argument("--passive-health", action=argparse.BooleanOptionalAction,
                       default=True,
                       help="stop sending to replicas that hold requests and answer none "
                            "while others answer, and send the GETs they hold elsewhere "
                            "(default on)")
    proxy.add_argument("--allow-router-module", action="append", default=[], metavar="MODULE",
                       help="let deployments route with RequestRouter classes of this module "
                            "or package, importable here (repeatable; servefleet's own "
                            "routers need none): docs/routing.md")
    proxy.add_argument("--websocket-idle-timeout-s", type=float, default=0.0, metavar="S",
                       help="close a WebSocket (1001) after this long without a message "
                            "either way; not --request-timeout-s (default 0: no limit)")
    proxy.add_argument("--forwarded-allow-ips", default=DEFAULT_TRUSTED, metavar="IPS",
                       help="peers (addresses, networks or *) whose x-forwarded-proto is "
                            "passed on, e.g. a load balancer that ends TLS; the client's "
                            "address is always added to x-forwarded-for (default loopback)")
    proxy.add_argument("--access-log", action="store_true",
                       help="log one line per routed request, with its x-request-id")
    proxy.add_argument("--tls-cert", default=None, metavar="FILE",
                       help="serve HTTPS with this PEM certificate chain (with --tls-key)")
    proxy.add_argument("--tls-key", default=None, metavar="FILE",
                       help="the private key of --tls-cert (PEM)")
    proxy.add_argument("--http-tokens", default=None, metavar="FILE",
                       help="bearer tokens for applications with require_token and for "
                            "the admin paths (servefleet token create; reread on SIGHUP)")
    security.add_tls_flags(proxy, "proxy")
    security.add_server_name_flag(proxy)
    proxy.add_argument("--token", default=None,
                       help="a token of role proxy for the controllers, on a cluster with "
                            f"tokens and no TLS (default: ${ENV_TOKEN})")
    proxy.set_defaults(run=cmd_proxy)
