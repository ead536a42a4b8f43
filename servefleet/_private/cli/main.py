"""The `servefleet` command.

Subcommands: `up` runs a whole servefleet in the foreground; `controller`
and `proxy` run one service each; `deploy`, `status`, `config`, `list`,
`replicas`, `delete` and `shutdown` talk to a running cluster (default: the
controller `up` starts, 127.0.0.1:7373). Every error prints one line on
stderr (a config error names the file and the path in it) and exits
non-zero (1 for a failed call, 2 for bad usage); no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from collections.abc import Callable, Sequence

from servefleet._private import lifecycle, logs, tracing_setup
from servefleet._private.security.tls import ENV_TOKEN
from servefleet._private.wire import DEFAULT_CONTROLLER, DEFAULT_HTTP, ENV_CONTROLLER
from servefleet.client import (
    ControllerClient,
    ControllerError,
    NoControllerRunning,
    resolve_addresses,
)
from servefleet.proxy.access import ADMIN_MODES
from servefleet.proxy.forwarded import DEFAULT_TRUSTED, Forwarded
from servefleet.proxy.limits import add_edge_flags, edge_limits
from servefleet.proxy.routes import DEFAULT_ANSWER_START_S

from . import apps, build_config, output, security, up
from .errors import EXIT_FAILED, EXIT_USAGE, CommandFailed, UsageError

# A command whose every controller address refuses connections gives up after
# this long (a controller that answers without a leader yet is waited for).
REFUSED_AFTER_S = 2.0


def _add_controller_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--controller", metavar="ADDR[,ADDR...]", default=None,
        help=f"controller addresses (default: ${ENV_CONTROLLER}, else {DEFAULT_CONTROLLER})")
    parser.add_argument("--timeout", type=float, default=15.0, metavar="S",
                        help="seconds to keep trying to reach the leader (default 15)")
    security.add_client_flags(parser)


def _client(args: argparse.Namespace) -> ControllerClient:
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout}: must be a positive number of seconds")
    try:
        return ControllerClient(args.controller, timeout=args.timeout,
                                refused_after=min(REFUSED_AFTER_S, args.timeout),
                                credentials=security.credentials(args))
    except ValueError as e:
        raise UsageError(f"--controller: {e}") from None


def cmd_controller(args: argparse.Namespace) -> int:
    from servefleet.controller.server import ControllerConfig, serve
    from servefleet.controller.store import StoreURLError

    config = ControllerConfig(store_url=args.store, listen=args.listen, advertise=args.advertise,
                              cluster=args.cluster, lease_ttl=args.lease_ttl,
                              runtime=args.runtime, runtime_dir=args.runtime_dir,
                              replica_host=args.replica_host,
                              docker_image=args.docker_image,
                              docker_network=args.docker_network,
                              docker_code=args.docker_code,
                              metrics_listen=args.metrics_listen,
                              allow_http_hosts=tuple(args.allow_http_host),
                              **security.controller_security(args))
    try:
        config.validate()
        asyncio.run(serve(config))
    except (ValueError, StoreURLError) as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        print(f"servefleet controller: {e}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    from servefleet._private.security.tokens import TokenFileError
    from servefleet.proxy.main import ProxyOptions, serve
    from servefleet.proxy.workers import Supervisor, worker_index

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
    if not 0 <= args.websocket_idle_timeout_s < 1e9:
        raise UsageError("--websocket-idle-timeout-s: 0 (no limit) or more seconds")
    try:
        Forwarded(args.forwarded_allow_ips)
    except ValueError as e:
        raise UsageError(f"--forwarded-allow-ips: {e}") from None
    worker = worker_index()
    if args.workers > 1 and worker is None:
        return Supervisor(args.argv, args.workers).run()
    options = ProxyOptions(
        worker=worker,
        controllers=args.controller or os.environ.get(ENV_CONTROLLER) or DEFAULT_CONTROLLER,
        listen=args.listen, request_timeout_s=args.request_timeout_s,
        answer_start_timeout_s=args.answer_start_timeout_s,
        credentials=security.proxy_credentials(args), limits=limits,
        admin_paths=args.admin_paths,
        tls_cert=args.tls_cert, tls_key=args.tls_key, http_tokens=args.http_tokens,
        access_log=args.access_log, metrics=args.metrics, grpc_listen=args.grpc_listen,
        passive_health=args.passive_health,
        websocket_idle_timeout_s=args.websocket_idle_timeout_s,
        forwarded_allow_ips=args.forwarded_allow_ips,
        router_modules=tuple(args.allow_router_module))
    try:
        lifecycle.run(serve(options))
    except TokenFileError as e:
        raise UsageError(f"--http-tokens: {e}") from None
    except OSError as e:
        print(f"servefleet proxy: {e}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def cmd_xds_bootstrap(args: argparse.Namespace) -> int:
    from servefleet._private.xds_bootstrap import render

    addresses = resolve_addresses(args.controller)
    if bool(args.cert) != bool(args.key):
        raise UsageError("--cert and --key go together")
    if args.cert and not args.ca:
        raise UsageError("--cert needs --ca (the CA that signed the controllers' certificates)")
    for flag, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key)):
        if path and not os.path.isfile(path):
            raise UsageError(f"{flag} {path}: no such file")
    print(render(addresses, node_id=args.node_id,
                 ca=os.path.abspath(args.ca) if args.ca else None,
                 cert=os.path.abspath(args.cert) if args.cert else None,
                 key=os.path.abspath(args.key) if args.key else None), end="")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        reply = client.status()
    print(output.to_json(reply) if args.json else output.status_text(reply))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        records = client.list(include_deleted=args.all, application=args.app or "")
    print(output.records_json(records) if args.json else output.records_text(records))
    return 0


def cmd_replicas(args: argparse.Namespace) -> int:
    with _client(args) as client:
        infos = client.replicas(application=args.app or "", deployment=args.name or "")
    print(output.records_json(infos) if args.json else output.replicas_text(infos))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    if not 1 <= args.tail <= 10_000:
        raise UsageError("--tail: between 1 and 10000 lines")
    with _client(args) as client:
        try:
            for chunk in client.logs(args.app or "", args.name or "", args.replica or "",
                                     args.tail, args.follow, args.request_id or ""):
                for line in chunk.lines:
                    print(f"{chunk.replica_id} | {line}", flush=args.follow)
        except KeyboardInterrupt:
            return 0
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servefleet", description=__doc__.splitlines()[0])
    parser.add_argument("--log-format", default=None, choices=logs.FORMATS,
                        help="text (default) or json: one JSON object per line with "
                             "component and request_id (default: $SERVEFLEET_LOG_FORMAT)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    tracing_setup.add_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ctl = commands.add_parser("controller", help="run a controller")
    ctl.add_argument("--store", required=True, metavar="URL",
                     help="etcd://host:port[,host:port...] or sqlite:///path/state.db")
    ctl.add_argument("--listen", default=DEFAULT_CONTROLLER, metavar="HOST:PORT")
    ctl.add_argument("--advertise", default=None, metavar="HOST:PORT",
                     help="address others reach this controller at (default: --listen; when "
                          "that binds every interface, this host's address towards etcd)")
    ctl.add_argument("--cluster", default="default", metavar="NAME")
    ctl.add_argument("--lease-ttl", type=float, default=5.0, metavar="S",
                     help="leader lease TTL in seconds (default 5)")
    ctl.add_argument("--runtime", default="process",
                     choices=["process", "docker", "swarm", "none"],
                     help="where replicas run: local processes (default), Docker "
                          "containers, Docker Swarm services (the docker flags apply), or "
                          "none: store and serve goals without running replicas")
    ctl.add_argument("--runtime-dir", default="~/.servefleet/runtime", metavar="DIR",
                     help="process runtime: replica settings and logs (default %(default)s)")
    ctl.add_argument("--replica-host", default="127.0.0.1", metavar="IP",
                     help="process runtime: the address replicas bind and are reached at "
                          "(default %(default)s; this host's address when proxies run elsewhere)")
    ctl.add_argument("--docker-image", default="servefleet:latest", metavar="IMAGE",
                     help="docker runtime: the image of deployments that name none "
                          "(default %(default)s; build it from deploy/Dockerfile)")
    ctl.add_argument("--docker-network", default="host", metavar="NETWORK",
                     help="docker runtime: the network replica containers join "
                          "(default %(default)s)")
    ctl.add_argument("--docker-code", default="mount", choices=["mount", "image"],
                     help="docker runtime: bind-mount each deployment's working dir from "
                          "this host (default), or find it inside the image (a controller "
                          "that itself runs in a container)")
    ctl.add_argument("--metrics-listen", default=None, metavar="HOST:PORT",
                     help="serve /metrics, /-/metrics-targets (Prometheus http_sd) and the "
                          "dashboard here (HTTPS and credentials when the cluster has TLS or "
                          "tokens)")
    ctl.add_argument("--allow-http-host", action="append", default=[], metavar="NAME",
                     help="a DNS name the --metrics-listen face answers to besides localhost "
                          "and IP addresses (repeatable)")
    security.add_controller_flags(ctl)
    ctl.set_defaults(run=cmd_controller)

    proxy = commands.add_parser("proxy", help="run an HTTP (and gRPC) proxy")
    proxy.add_argument("--controller", metavar="ADDR[,ADDR...]", default=None,
                       help=f"controller addresses (default: ${ENV_CONTROLLER}, "
                            f"else {DEFAULT_CONTROLLER})")
    proxy.add_argument("--listen", default=DEFAULT_HTTP, metavar="HOST:PORT")
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
    proxy.add_argument("--tls-key", default=None, metavar="FILE")
    proxy.add_argument("--http-tokens", default=None, metavar="FILE",
                       help="bearer tokens for applications with require_token and for "
                            "the admin paths (servefleet token create; reread on SIGHUP)")
    security.add_tls_flags(proxy, "proxy")
    proxy.add_argument("--token", default=None,
                       help="a token of role proxy for the controllers, on a cluster with "
                            f"tokens and no TLS (default: ${ENV_TOKEN})")
    proxy.set_defaults(run=cmd_proxy)

    status = commands.add_parser("status", help="applications, deployments and proxies")
    _add_controller_flag(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=cmd_status)

    lst = commands.add_parser("list", help="list deployments")
    _add_controller_flag(lst)
    lst.add_argument("--all", action="store_true", help="include deleted deployments")
    lst.add_argument("--app", default=None, help="only this application")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(run=cmd_list)

    replicas = commands.add_parser("replicas", help="list replicas, their state and address")
    _add_controller_flag(replicas)
    replicas.add_argument("name", nargs="?", metavar="DEPLOYMENT")
    replicas.add_argument("--app", default=None, help="only this application")
    replicas.add_argument("--json", action="store_true")
    replicas.set_defaults(run=cmd_replicas)

    logs_cmd = commands.add_parser("logs", help="replicas' output, from any runtime")
    _add_controller_flag(logs_cmd)
    logs_cmd.add_argument("name", nargs="?", metavar="DEPLOYMENT")
    logs_cmd.add_argument("--app", default=None, help="only this application")
    logs_cmd.add_argument("--replica", default=None, metavar="ID", help="only this replica")
    logs_cmd.add_argument("--tail", type=int, default=100, metavar="N",
                          help="past lines of each replica to show first (default 100)")
    logs_cmd.add_argument("-f", "--follow", action="store_true",
                          help="keep printing new lines until Ctrl-C")
    logs_cmd.add_argument("--request-id", default=None, metavar="ID",
                          help="only this request's lines (its x-request-id), from every "
                               "replica it passed through")
    logs_cmd.set_defaults(run=cmd_logs)

    xds = commands.add_parser("xds-bootstrap", help="print the bootstrap JSON of a proxyless "
                                                    "gRPC client (GRPC_XDS_BOOTSTRAP)")
    xds.add_argument("--controller", metavar="ADDR[,ADDR...]", default=None,
                     help=f"controller addresses (default: ${ENV_CONTROLLER}, else "
                          f"{DEFAULT_CONTROLLER})")
    xds.add_argument("--node-id", default="", help="the client's node id (default: made up)")
    xds.add_argument("--ca", default=None, metavar="FILE",
                     help="the cluster CA: TLS to the controllers (with --cert/--key: mutual)")
    xds.add_argument("--cert", default=None, metavar="FILE")
    xds.add_argument("--key", default=None, metavar="FILE")
    xds.set_defaults(run=cmd_xds_bootstrap)

    apps.add_commands(commands, _add_controller_flag, _client)
    security.add_commands(commands)
    up.add_command(commands)
    build_config.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        logs.configure(args.command, args.log_level, args.log_format)
    except ValueError as e:  # a bad SERVEFLEET_LOG_FORMAT
        print(f"servefleet: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        tracing_setup.from_command(args.command, args.tracing)
    except tracing_setup.TracingUnavailable as e:
        print(f"servefleet --tracing: {e}", file=sys.stderr)
        return EXIT_USAGE
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except UsageError as e:
        print(f"servefleet {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except CommandFailed as e:
        print(f"servefleet {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except NoControllerRunning as e:
        print(f"servefleet {args.command}: {e.details}; start one with `servefleet up`, or "
              f"name a running one with --controller or ${ENV_CONTROLLER}", file=sys.stderr)
        return EXIT_FAILED
    except ControllerError as e:
        print(f"servefleet {args.command}: {e.code.name}: {e.details}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`servefleet list | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
