"""The controller process: gRPC server, leadership terms, graceful shutdown.

Lifecycle (in the manner of uvicorn's Server):

1. startup: open the store, start the gRPC server (ControllerService behind
   the leader gate, health, reflection) and the leadership loop;
2. main loop, one leader term after another: campaign; once elected, renew
   the lease in the background while loading the goals from the store; then
   serve until leadership is lost, and campaign again;
3. shutdown, on SIGTERM/SIGINT or the Shutdown RPC: stop serving, let
   in-flight calls finish, resign so a standby takes over at once, close the
   store. A second signal exits at once. `stop()` is idempotent.

Health: the overall service ("") is SERVING while the process runs, for
liveness probes; "servefleet.v1.ControllerService" is SERVING only on the
serving leader, for load balancers that should find it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2, ads_pb2_grpc
from envoy.service.status.v3 import csds_pb2, csds_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from servefleet._private.grpc_guard import Guard, Refused
from servefleet._private.lifecycle import (
    can_bind,
    is_loopback,
    notify_ready,
    on_stop_signals,
    start_http_server,
)
from servefleet._private.observability import loop_metrics
from servefleet._private.observability.logs import LEADER_TERM
from servefleet._private.security.certs import role_server_name
from servefleet._private.security.tls import Credentials, add_port
from servefleet.v1 import controller_pb2, controller_pb2_grpc

from .api.auth import Authorizer
from .api.gate import SERVICE_NAME, LeaderGate, Leadership
from .api.hop_pass import HopSubjects, revoke_replaced_tokens
from .api.http import ControllerHttp
from .api.http_gate import HttpGate, server_tls
from .api.servicer import ControllerServicer
from .cert_revocation import CertRevocation
from .clock import Clock
from .config import ControllerConfig
from .election import LeaderElection
from .keys import ClusterKeys
from .kube_apps.client import ServeApplications
from .members import Membership
from .metrics import TERM, TERMS
from .reconcile.loop import tune_gc
from .reconcile.replica_client import GrpcReplicaClient
from .runtime.choose import make_runtime
from .runtime.sandbox import tried
from .store import Store, StoreOpenError, open_store
from .term import LeaderTerm, TermParts
from .xds.ads import AggregatedDiscovery
from .xds.csds import ClientStatus
from .xds.hop_header import term_passes

logger = logging.getLogger(__name__)

# How long the Shutdown RPC waits for replicas to drain before the controller exits.
SHUTDOWN_REPLICAS_TIMEOUT_S = 60.0
# Calls gRPC may hold before the application takes them (its default, 3,000,
# cancelled the rest of a burst of Watch streams); each costs a few hundred bytes.
MAX_PENDING_CALLS = 100_000
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class ControllerServer:
    def __init__(self, config: ControllerConfig, store: Store | None = None,
                 clock: Clock | None = None) -> None:
        config.validate()
        self.config = config
        self._clock = clock or Clock()
        self._store = store or open_store(config.store_url, config.etcd_tls or config.tls)
        self.authorizer = Authorizer(config.auth_tokens, tls=config.tls is not None)
        # Certificates revoked one by one: refused on every port, told to replicas.
        self.revoked_certs = CertRevocation(config.revoked_certs, config.tls is not None,
                                            lambda: self.term)
        self.authorizer.replica_tokens = self._replica_token_owner
        self.hop_subjects = HopSubjects(self.authorizer)
        self.hop_subjects.replica_ids = self._replica_token_id
        keys = ClusterKeys(config.cluster)
        self.election = LeaderElection(self._store, keys.leader, config.advertised(),
                                       config.lease_ttl, self._clock)
        self._leadership = Leadership(self.election)
        self.membership = Membership(self._store, keys.controllers, config.advertised(),
                                     config.lease_ttl, self._clock)
        self._members: asyncio.Task[None] | None = None
        # Where each live controller serves /metrics (for scrape discovery).
        metrics_at = config.metrics_advertised()
        self.metrics_members = (
            Membership(self._store, keys.metrics_endpoints, metrics_at,
                       config.lease_ttl, self._clock) if metrics_at else None)
        self._metrics_task: asyncio.Task[None] | None = None
        self._http: Any = None
        TERM.identity = config.advertised()
        TERM.term = lambda: self.term
        self._sandbox = tried(config.sandbox(), config.replica_user)
        self._replica_client = GrpcReplicaClient(
            Credentials(config.tls, server_name=role_server_name("replica")),
            hop_metadata=lambda: self.term.hop.controller_metadata() if self.term else ())
        self._parts = TermParts(config.cluster, keys, self._store, self.election, self._clock,
                                make_runtime(self.config, self._sandbox), self._replica_client,
                                lambda: self.membership.addresses,
                                policy=config.deploy_policy(), sandbox=self._sandbox,
                                hop_required=self.authorizer.enabled,
                                revoked_certs=self.revoked_certs.serials,
                                kube_applications=ServeApplications.connect(
                                    config.kubeconfig, config.kube_namespace)
                                if config.kube_applications else None)
        # The serving leader term, or None while this controller does not lead.
        self.term: LeaderTerm | None = None
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._terms: asyncio.Task[None] | None = None
        self._stop_requested = asyncio.Event()
        self._stop_replicas = False
        self._stopped = False
        self.bound_port = 0

    # -- 1. startup -------------------------------------------------------------

    async def start(self) -> None:
        """Open the store and start serving; OSError when either is impossible."""
        try:
            await self._store.open()
        except StoreOpenError as e:
            raise OSError(str(e)) from None
        # No SO_REUSEPORT: a second process on the same port must fail, not share it.
        # gRPC queues calls the server has not yet handed to the application and
        # by default cancels those past 3,000: a burst of Watch streams (a large
        # cluster reconnecting after a failover) lost every call past it.
        server = grpc.aio.server(
            interceptors=[*self.revoked_certs.interceptors(), LeaderGate(self._leadership),
                          Guard(SERVICE_NAME, self.authorizer.check),
                          # Health parses through a Guard too: garbage gets
                          # INVALID_ARGUMENT, not gRPC's UNKNOWN.
                          Guard(health_pb2.DESCRIPTOR.services_by_name["Health"].full_name)],
            options=[("grpc.so_reuseport", 0),
                     ("grpc.server.max_pending_requests", MAX_PENDING_CALLS),
                     ("grpc.server.max_pending_requests_hard_limit", MAX_PENDING_CALLS)])
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(
            ControllerServicer(self.config.cluster, self._leadership, lambda: self.term,
                               self.membership,
                               on_shutdown=lambda: self.request_stop(stop_replicas=True),
                               role=self.authorizer.role, hop_subject=self.hop_subjects.of),
            server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self.xds = AggregatedDiscovery(lambda: self.term.publisher if self.term else None,
                                       self._leadership.can_serve,
                                       self._leadership.abort_not_leader, self._check_xds,
                                       self._leadership.hint, self._peer_channel,
                                       lambda: self.term.fence if self.term else None,
                                       term_passes(lambda: self.term.hop if self.term else None,
                                                   self.hop_subjects.of, self._clock.time))
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(self.xds, server)
        csds_pb2_grpc.add_ClientStatusDiscoveryServiceServicer_to_server(
            ClientStatus(self.xds, self._check_xds), server)
        reflection.enable_server_reflection([
            controller_pb2.DESCRIPTOR.services_by_name["ControllerService"].full_name,
            ads_pb2.DESCRIPTOR.services_by_name["AggregatedDiscoveryService"].full_name,
            csds_pb2.DESCRIPTOR.services_by_name["ClientStatusDiscoveryService"].full_name,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ], server)
        # Checked first: gRPC's own failure to bind also prints a C-core error line.
        if not can_bind(self.config.listen):
            self.bound_port = 0
        else:
            try:
                self.bound_port = add_port(server, self.config.listen, self.config.tls)
            except RuntimeError:
                self.bound_port = 0
        if not self.bound_port:
            raise OSError(f"cannot listen on {self.config.listen}: the address is in use "
                          "or not available here (--listen chooses another)")
        await self._health.set("", SERVING)
        await self._health.set(SERVICE_NAME, NOT_SERVING)
        await server.start()
        self._server = server
        logger.info("controller listening on %s (advertised as %s), cluster %r, store %s, %s",
                    self.config.listen, self.election.identity, self.config.cluster,
                    self.config.store_url, self._security_summary())
        logger.info("deploy policy: %s", self._parts.policy.describe())
        if not self.authorizer.enabled and not is_loopback(self.config.listen):
            logger.warning("listening on %s without TLS or tokens: anyone who reaches this "
                           "port can deploy code; use --certs DIR and/or --auth-tokens FILE",
                           self.config.listen)
        self._terms = asyncio.create_task(self._lead_forever(), name="leader-terms")
        self._members = asyncio.create_task(self.membership.run(), name="membership")
        await self._start_http()

    def reload_credentials(self) -> None:
        """SIGHUP: the token file and the revoked certificates, read again; the
        hop passes of tokens revoked or replaced are revoked too (by a leader)."""
        before = self.authorizer.tokens
        self.authorizer.reload()
        self.revoked_certs.reload()
        if self.term is not None:
            revoke_replaced_tokens(self.term.hop, before, self.authorizer.tokens)

    def _peer_channel(self, address: str) -> grpc.aio.Channel:
        """A channel to another controller, as this controller (its certificate)."""
        credentials = Credentials(self.config.tls,
                                  server_name=role_server_name("controller")
                                  if self.config.tls else None)
        return credentials.aio_channel(address)

    async def _check_xds(self, context: grpc.aio.ServicerContext) -> None:
        """xDS clients read what Watch streams do: the same rule (auth.py)."""
        try:
            await self.authorizer.check("Watch", None, context)
        except Refused as e:
            await context.abort(e.code, f"StreamAggregatedResources: {e.message}")

    async def _start_http(self) -> None:
        """The metrics server (--metrics-listen); OSError when it cannot bind."""
        if self.config.metrics_listen is None or self.metrics_members is None:
            return
        members = self.metrics_members
        host, _, port = self.config.metrics_listen.rpartition(":")
        app = ControllerHttp(lambda: self.term, lambda: members.addresses,
                             lambda: self.election.leader, self.config.cluster,
                             self._leadership.identity, lambda: self.membership.addresses,
                             HttpGate(self.authorizer, self.config.allow_http_hosts))
        self._http = await start_http_server(app, host.strip("[]"), int(port),
                                             **server_tls(self.config.tls,
                                                          self.revoked_certs.serials))
        self._metrics_task = asyncio.create_task(members.run(), name="metrics-membership")
        logger.info("metrics on %s://%s/metrics%s", "https" if self.config.tls else "http",
                    self.config.metrics_listen,
                    " (credentials needed)" if self.authorizer.enabled else "")

    def _replica_token_owner(self, hashed: str) -> tuple[str, str] | None:
        """Whose replica token this is, by the serving term's registry."""
        term = self.term
        if term is None or term.replicas is None:
            return None
        return term.replicas.token_owner(hashed)

    def _replica_token_id(self, hashed: str) -> str | None:
        term = self.term
        if term is None or term.replicas is None:
            return None
        return term.replicas.token_replica(hashed)

    def _security_summary(self) -> str:
        parts = ["mutual TLS" if self.config.tls else "plain text"]
        if self.authorizer.tokens is not None:
            parts.append(f"{len(self.authorizer.tokens)} tokens")
        if not self.authorizer.enabled:
            parts.append("no authentication (every caller is admin)")
        return ", ".join(parts)

    # -- 2. leader terms ----------------------------------------------------------

    async def _lead_forever(self) -> None:
        while True:
            try:
                await self._one_term()
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # stop() cancelled us
                # A CancelledError from inside (a closed channel, say) is a bug
                # to survive, not an order to stop campaigning.
                logger.exception("leader term ended by a stray cancellation; campaigning again")
                await self._clock.sleep(1.0)
            except Exception:
                # A bug in a term must not end the process's campaigning.
                logger.exception("leader term failed; campaigning again")
                await self._clock.sleep(1.0)

    async def _one_term(self) -> None:
        token = await self.election.campaign()
        holding = asyncio.create_task(self.election.hold(), name="lease-keepalive")
        # The term's tasks (made from here) log with it.
        term_token = LEADER_TERM.set(token)
        logger.info("leading with term %d", token)  # where this term's span begins (chaos)
        term = LeaderTerm(token, self._parts)
        try:
            if await term.load(holding):
                term.start()
                self.term = term
                TERMS.inc()
                self._leadership.serving = True
                await self._health.set(SERVICE_NAME, SERVING)
            await asyncio.shield(holding)
        finally:
            self._leadership.serving = False
            self.term = None
            await term.stop()  # stop acting at once
            LEADER_TERM.reset(term_token)
            await self._health.set(SERVICE_NAME, NOT_SERVING)
            if not holding.done():  # cancelled by stop(): hand over at once
                await self.election.resign()
                await holding

    # -- 3. shutdown ----------------------------------------------------------------

    def request_stop(self, *, stop_replicas: bool = False) -> None:
        """Begin shutdown. Replicas outlive the controller unless `stop_replicas`
        (the Shutdown RPC): then the deleted deployments' replicas are drained first."""
        self._stop_replicas = self._stop_replicas or stop_replicas
        self._stop_requested.set()

    async def wait_stop_requested(self) -> None:
        await self._stop_requested.wait()

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        logger.info("controller shutting down")
        term = self.term
        if self._stop_replicas and term is not None and self.election.is_leader:
            await term.wait_replicas_gone(SHUTDOWN_REPLICAS_TIMEOUT_S)
        self._leadership.serving = False
        if term is not None:
            term.publisher.close()  # Watch streams end now, not at the grace deadline
        if self._server is not None:
            await self._health.enter_graceful_shutdown()
            await self._server.stop(self.config.shutdown_grace_s)
        if self._terms is not None:
            self._terms.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._terms
        await self.election.resign()
        if self._members is not None:
            self._members.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._members
        await self.membership.leave()
        if self._metrics_task is not None and self.metrics_members is not None:
            self._metrics_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._metrics_task
            await self.metrics_members.leave()
        if self._http is not None:
            self._http.force_exit = True
            await self._http.shutdown()
        await self._replica_client.close()
        if self._parts.runtime is not None:
            self._parts.runtime.close()
        await self._store.close()
        logger.info("controller stopped")


async def serve(config: ControllerConfig) -> None:
    """Run a controller until SIGTERM/SIGINT or the Shutdown RPC."""
    tune_gc()
    server = ControllerServer(config)
    on_stop_signals(server.request_stop)
    loop_metrics.watch()
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, server.reload_credentials)
    await server.start()
    notify_ready(f"controller listening on {config.listen}")
    try:
        await server.wait_stop_requested()
    finally:
        await server.stop()
