"""The replica process: `python -m servefleet.replica --config-file F ...`.

Lifecycle:

1. startup: bind the gRPC control port (control.py, served on a loop of its
   own: control_loop.py) and the HTTP port (http.py), both chosen by the
   runtime, so the controller can follow the replica from its first second;
   the main loop, where user code runs, is watched for handlers that block
   it (loop_watch.py);
2. load the user's code (`Replica.load`, replica.py) while both serve;
3. follow config: watch `config/<app>/<deployment>` on the controllers it was
   given (the shared WatchClient follows the leader) and hand each snapshot
   to the replica, which applies those meant for its version and code;
4. drain, on the Drain RPC or SIGTERM/SIGINT (`Replica.wait_and_drain`); then
   stop both servers and exit. A second signal exits at once.

Identity (cluster, application, deployment, replica id, version) is on the
command line, so the process runtime can find its replicas by listing
processes. Exit codes (servefleet/_private/wire.py): 0 after a drain, 1 after a load
failure or a crash, 2 bad settings, 3 when a port cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from typing import Any

import grpc

from servefleet import metrics
from servefleet._private import lifecycle
from servefleet._private.grpc_guard import Guard, Refused
from servefleet._private.handles import handle
from servefleet._private.lifecycle import on_stop_signals, start_http_server
from servefleet._private.observability import logs, loop_metrics
from servefleet._private.observability.exposition import metrics_app
from servefleet._private.replica_command import add_arguments
from servefleet._private.security.hop_client import HOP_PASS
from servefleet._private.security.hop_tls import server_context
from servefleet._private.security.revocation_checks import RevokedCertInterceptor
from servefleet._private.security.roles import REPLICA_CONTROL
from servefleet._private.security.tls import (
    Credentials,
    TlsFiles,
    add_port,
    peer_role,
    set_process_credentials,
)
from servefleet._private.tracing import sdk as tracing_setup
from servefleet._private.watch_client import WatchClient
from servefleet._private.wire import (
    EXIT_BAD_SETTINGS,
    EXIT_BIND_FAILURE,
    EXIT_FAILED,
    HOP_KEY,
    ROUTES_KEY,
    config_key,
)
from servefleet.v1 import replica_pb2, replica_pb2_grpc, watch_pb2

from .client_address import ClientAddress
from .control import ReplicaControl
from .control_loop import ControlLoop
from .edge import ReplicaEdge, limits_from_env
from .hop_gate import ControlPassCheck
from .loop_watch import SAMPLE_S, LoopWatch
from .replica import PHASE, Replica, ReplicaSettings

logger = logging.getLogger("servefleet.replica")
CONTROL_SERVICE = replica_pb2.DESCRIPTOR.services_by_name["ReplicaService"].full_name


async def only_controllers(method: str, request: object,
                           context: grpc.aio.ServicerContext) -> None:
    """With mutual TLS, control calls come from controllers' certificates only."""
    role = peer_role(context.auth_context())
    if role not in REPLICA_CONTROL:
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"{method}: only controllers may call a replica (the caller's "
                      f"certificate is for {role!r})")


def take_credentials(settings: ReplicaSettings) -> TlsFiles | None:
    """Read the replica's key and certificates into memory, then drop to the
    sandbox's user, if any: from then on nothing here can open the files a
    replica of the controller's user could. Handles in user code call the
    controllers as this replica through `set_process_credentials`, with the
    token and keys in memory, none in the environment. OSError when the
    working dir is not readable as that user."""
    tls = TlsFiles.from_dict(settings.tls)
    if tls is not None:
        tls = tls.loaded()
    elif settings.http_tls:
        raise ValueError("--http-tls 1 needs the cluster's certificates (settings' tls)")
    set_process_credentials(Credentials(tls, settings.token or None,
                                        settings.controller_server_name or None))
    if settings.run_as:
        uid, _, gid = settings.run_as.partition(":")
        os.setgroups([])
        os.setgid(int(gid or uid))
        os.setuid(int(uid))
        where = settings.working_dir
        if where and not os.access(where, os.R_OK | os.X_OK):
            raise OSError(f"the working dir {where} cannot be read by uid {uid}, the user "
                          "replicas run as (the controller's --replica-user): let others "
                          "read it, or choose another user")
    return tls


def control_server(replica: Replica, control: ControlLoop, watch: LoopWatch,
                   tls: TlsFiles | None, edge: ReplicaEdge) -> grpc.aio.Server:
    """The control gRPC server, made on the control loop (control_loop.py).
    RuntimeError when its port cannot be bound."""
    # No SO_REUSEPORT: a port another replica holds must fail the bind
    # (EXIT_BIND_FAILURE), not be shared with it. Its callers reach it before
    # they are checked: the edge's limits (edge.py) apply here too.
    # Without TLS, in a cluster with tokens: a controller's hop pass, checked
    # before the Guard parses the message.
    by_pass = [ControlPassCheck(replica.hop_gate)] if not tls and replica.hop_gate else []
    server = grpc.aio.server(
        interceptors=[RevokedCertInterceptor(replica.revoked_certs), *by_pass,
                      Guard(CONTROL_SERVICE, only_controllers if tls else None)],
        options=[("grpc.so_reuseport", 0), *edge.grpc_options()])
    replica_pb2_grpc.add_ReplicaServiceServicer_to_server(
        ReplicaControl(replica, control, watch), server)
    add_port(server, f"{replica.settings.host}:{replica.settings.control_port}", tls)
    return server


async def run(settings: ReplicaSettings, tls: TlsFiles | None) -> int:
    try:  # every port's limits (edge.py)
        edge = ReplicaEdge(limits_from_env(os.environ, lifecycle.raise_open_file_limit()))
    except ValueError as e:
        print(f"replica: bad settings: {e}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    replica = Replica(settings)
    loop_watch = LoopWatch()
    loop_watch.start()
    replica.loop_watch = loop_watch
    control = ControlLoop(asyncio.get_running_loop())
    try:
        await control.start(lambda: control_server(replica, control, loop_watch, tls, edge))
    except RuntimeError:
        print(f"replica: cannot bind control port {settings.control_port}", file=sys.stderr)
        return EXIT_BIND_FAILURE
    control.repeat(SAMPLE_S, loop_watch.sample)
    try:
        # The client as the proxy names it (client_address.py: uvicorn's
        # proxy_headers, with the answers remembered).
        http = await start_http_server(ClientAddress(replica.app), settings.host,
                                       settings.http_port, proxy_headers=False,
                                       ssl=server_context(tls, replica.revoked_certs)
                                       if tls and settings.http_tls
                                       else None, http=edge.http_protocol())
    except OSError:
        print(f"replica: cannot bind HTTP port {settings.http_port}", file=sys.stderr)
        await control.stop(0)
        return EXIT_BIND_FAILURE
    ingress = None
    if settings.grpc_port:
        # The user's services: TLS like the HTTP port when the controller says
        # so (a client certificate of the cluster's CA required), else plain.
        ingress = grpc.aio.server(handlers=[replica.grpc.generic_handler()],
                                  interceptors=[RevokedCertInterceptor(replica.revoked_certs)],
                                  options=[("grpc.so_reuseport", 0), *edge.grpc_options()])
        try:
            add_port(ingress, f"{settings.host}:{settings.grpc_port}",
                     tls if settings.http_tls else None)
        except RuntimeError:
            print(f"replica: cannot bind gRPC port {settings.grpc_port}", file=sys.stderr)
            await http.shutdown()
            await control.stop(0)
            return EXIT_BIND_FAILURE
        await ingress.start()
    metrics_server = None
    if settings.metrics_port:
        metrics.bind_replica(settings.application, settings.deployment, settings.replica_id)
        try:
            metrics_server = await start_http_server(metrics_app, settings.host,
                                                     settings.metrics_port,
                                                     http=edge.http_protocol())
        except OSError:
            print(f"replica: cannot bind metrics port {settings.metrics_port}", file=sys.stderr)
            await http.shutdown()
            if ingress is not None:
                await ingress.stop(0)
            await control.stop(0)
            return EXIT_BIND_FAILURE
    edge.clock.start()
    on_stop_signals(replica.request_drain)
    loop_metrics.watch()
    handle.use_loop(asyncio.get_running_loop())  # for handle calls from sync user code

    watch = None
    if settings.controllers:
        # Its config, and the route table for the cluster's body limit (edge.py).
        keys = [config_key(settings.application, settings.deployment), ROUTES_KEY]
        if settings.hop_required:
            keys.append(HOP_KEY)  # the keys passes are checked by, and revocations
        watch = WatchClient(settings.controllers, keys,
                            on_snapshot=edge.watching(replica.on_config_snapshot),
                            kind=watch_pb2.WATCHER_KIND_REPLICA,
                            address=f"{settings.host}:{settings.http_port}",
                            watcher_id=settings.replica_id,
                            credentials=Credentials.from_env())
        watch.start()
        if settings.hop_required:  # its own pass, for its handles' calls
            HOP_PASS.set(settings.hop_pass, settings.hop_pass_expires)
            HOP_PASS.renew(watch)
    loading = asyncio.create_task(replica.load())
    await replica.wait_and_drain()
    loading.cancel()
    if watch is not None:
        await watch.close()
    http.force_exit = replica.admission.ongoing > 0
    http.config.timeout_graceful_shutdown = 1
    await http.shutdown()
    if ingress is not None:
        await ingress.stop(0.5)
    if metrics_server is not None:
        metrics_server.force_exit = True
        await metrics_server.shutdown()
    await control.stop(0.5)
    edge.clock.stop()
    replica.executor.shutdown(wait=False, cancel_futures=True)
    replica.app.threads.shutdown()
    failed = replica.phase == PHASE.REPLICA_PHASE_FAILED
    logger.info("replica %s exiting", settings.replica_id)
    return EXIT_FAILED if failed else 0


def parse_args(argv: list[str] | None = None) -> ReplicaSettings:
    parser = argparse.ArgumentParser(prog="servefleet-replica")
    add_arguments(parser)
    args = parser.parse_args(argv)
    with open(args.config_file) as f:
        spec: dict[str, Any] = json.load(f)
    return ReplicaSettings(
        cluster=args.cluster, application=args.application, deployment=args.deployment,
        replica_id=args.replica_id, version=args.version, host=args.host,
        control_port=args.control_port, http_port=args.http_port,
        metrics_port=args.metrics_port, grpc_port=args.grpc_port, http_tls=args.http_tls,
        **spec)


def main(argv: list[str] | None = None) -> int:
    try:
        settings = parse_args(argv)
        logs.configure("replica", fmt=None, application=settings.application,
                       deployment=settings.deployment, replica=settings.replica_id)
        # Traced when the controller was (its environment is inherited).
        tracing_setup.configure("replica", service_name=settings.deployment,
                                service_namespace=settings.application,
                                service_instance_id=settings.replica_id)
        tls = take_credentials(settings)
    except (OSError, ValueError, TypeError, tracing_setup.TracingUnavailable) as e:
        print(f"replica: bad settings: {e}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    code = EXIT_FAILED
    try:
        code = lifecycle.run(run(settings, tls))
    except BaseException:
        logger.exception("replica crashed")
    logging.shutdown()
    # Exit now: a user thread stuck in a constructor or a sync handler must not
    # keep the process alive past its drain timeout.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
