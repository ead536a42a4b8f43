"""One leader term: the parts that live while this controller leads, in their order.

A term is made when this controller wins an election, with the leader key's
create revision as its fencing token, and ends when leadership is lost or
the process stops. It owns:

- the fenced store of its token, and through it the deployment and
  application tables (goals/) and the cluster's hop key (hop_keys.py);
- the Watch publisher and the state publisher that fills it from the tables
  and the observed replicas (watch.py);
- the reconcile loop (reconcile/loop.py) with the replica reconciler (when
  the controller has a runtime), the build reconciler and the autoscale
  reconciler, and the load reports the last one reads (soft state); with
  --kube-applications, the ServeApplication reconciler (kube_apps/);
- the traffic history the dashboard draws (traffic_history.py, soft state):
  a point per deployment every 5 s, taken by the loop, from the same sums
  of the proxies' reports that GetStatus shows.

`load` (1) loads the hop key and both tables, (2) recovers the replica registry against the
runtime, (3) publishes the first snapshots; each step is retried with the
loop's BACKOFF while the store is down and leadership holds. `start` then
runs the loop. `stop` undoes it in reverse: the loop and its work are
cancelled (stop acting at once), then the publisher closes so that Watch
streams end. A term is never reused: the next election makes a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

from google.protobuf.timestamp_pb2 import Timestamp

from servefleet._private.security.revocation import RevokedSerials
from servefleet._private.wire import HOP_KEY, replicas_key
from servefleet.v1 import application_pb2, records_pb2, replica_pb2, status_pb2, watch_pb2
from servefleet.v1 import controller_pb2 as api

from .api.redact import env_values, scrub
from .api.status import Observed, cluster_status
from .clock import Clock
from .drain_fence import DrainFence
from .election import FencedStore, LeaderElection
from .errors import NotFound, NotLeader, Unavailable
from .goals.applications import ApplicationTable
from .goals.deployments import MAX_DELETED_HISTORY, DeploymentTable
from .goals.policy import DeployPolicy
from .hop_keys import HopAuthority
from .keys import ClusterKeys
from .kube_apps.cache import ObjectsApi
from .kube_apps.owners import OwnerRecords
from .kube_apps.reconciler import ServeApplicationReconciler
from .load_reports import LoadReports, Traffic
from .reconcile.actor_retirement import ActorRetirement
from .reconcile.autoscaler import AutoscaleReconciler
from .reconcile.builder import run_build
from .reconcile.builds import Builder, BuildReconciler
from .reconcile.loop import BACKOFF, ReconcileLoop
from .reconcile.observed import ObservedState, ReplicaObservation
from .reconcile.planner import goal_of
from .reconcile.replica_client import ReplicaClient
from .reconcile.replica_ops import ReplicaOps
from .reconcile.replicas import ReplicaReconciler
from .runtime import Runtime
from .runtime.sandbox import Sandbox
from .state_publisher import StatePublisher
from .store import Store, StoreUnavailable
from .traffic_history import HistorySampler, TrafficHistory
from .unservable import application_unavailable, deployment_unavailable
from .watch import Publisher

logger = logging.getLogger(__name__)


@dataclass
class TermParts:
    """What every term of one controller process shares."""

    cluster: str
    keys: ClusterKeys
    store: Store
    election: LeaderElection
    clock: Clock
    # None: goals are stored and served, but no replicas are run (--runtime none).
    runtime: Runtime | None
    replica_client: ReplicaClient
    # The live controllers' addresses, handed to new replicas.
    controllers: Callable[[], list[str]]
    # How applications are built; None: run_build, as `sandbox` says.
    build: Builder | None = None
    # Deleted deployments kept for ListDeployments(include_deleted).
    max_history: int = MAX_DELETED_HISTORY
    # What deploys may run (--allow-working-dir, --allow-image, --allow-env).
    policy: DeployPolicy = field(default_factory=DeployPolicy)
    # Who user code run on this host runs as (--replica-user; runtime/sandbox.py).
    sandbox: Sandbox = field(default_factory=Sandbox)
    # Whether replicas serve only callers with a hop pass: the cluster has
    # tokens or certificates (hop_keys.py).
    hop_required: bool = False
    # The serial numbers of revoked certificates (--revoked-certs), published
    # with the hop trust.
    revoked_certs: RevokedSerials = field(default_factory=RevokedSerials)
    # The ServeApplications the leader applies (--kube-applications); None: none.
    kube_applications: ObjectsApi | None = None


def _stamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


class LeaderTerm:
    def __init__(self, token: int, parts: TermParts) -> None:
        self._parts = parts
        fenced = FencedStore(parts.store, parts.election, parts.keys.leader, token,
                             journal_key=parts.keys.last_write)
        self.publisher = Publisher()
        self._state: StatePublisher | None = None
        self.hop = HopAuthority(parts.keys, fenced, parts.clock, parts.hop_required,
                                lambda trust: self.publisher.publish(HOP_KEY, hop=trust),
                                lambda: parts.revoked_certs.serials)
        # Holds a replica's drain until reporters route by a set without it.
        self.fence = DrainFence(parts.clock, lambda: (
            w.watcher_id for w in self.publisher.watchers.values()))
        self.loop = ReconcileLoop(parts.clock, leading=fenced.still_valid)
        self.deployments = DeploymentTable(parts.keys, fenced, parts.store, parts.clock,
                                           self._goal_changed, parts.max_history)
        self.deployments.policy = parts.policy
        self.applications = ApplicationTable(parts.keys, fenced, parts.store, self.deployments,
                                             parts.clock, on_traffic=self._routes_changed,
                                             on_goal=self.loop.wake)
        self.replicas: ReplicaReconciler | None = None
        if parts.runtime is not None:
            ops = ReplicaOps(parts.cluster, parts.keys, fenced, parts.runtime,
                             parts.replica_client, parts.controllers,
                             self.publisher.watching, self.fence, self.hop)
            self.replicas = ReplicaReconciler(
                parts.keys, ops, self.loop, lambda: self.deployments.list(include_deleted=True),
                parts.clock, on_change=self._deployment_changed,
                suspects=lambda: self.load_reports.suspects())
            self.loop.add(self.replicas)
            self.deployments.gave_up, self.deployments.retry = (self.replicas.gave_up,
                                                                self.replicas.retry)
        self.applications.runs_code = parts.runtime is not None
        self.builds = BuildReconciler(self.applications, self.loop,
                                      parts.build or partial(run_build, sandbox=parts.sandbox))
        self.loop.add(self.builds)
        # An old version's deployment-scoped actors, deleted once its replicas are gone.
        self.loop.add(ActorRetirement(self.deployments, self.loop,
                                      lambda key: self.observed.deployments.get(key)))
        if parts.kube_applications is not None:
            self.loop.add(ServeApplicationReconciler(
                parts.kube_applications, OwnerRecords(parts.keys, fenced, parts.store),
                self.applications, self.status, self.loop, parts.clock))
        self.history = TrafficHistory(parts.clock)
        self.load_reports = LoadReports(parts.clock, on_errors=self.history.add_errors)
        self.autoscaler = AutoscaleReconciler(self.deployments, self.load_reports, self.loop,
                                              parts.clock, self._running_count)
        self.autoscaler.sandbox = parts.sandbox
        self.autoscaler.runs_code = parts.runtime is not None
        self.loop.add(self.autoscaler)
        self.loop.add(HistorySampler(self.history, self._traffic_figures))
        self.deployments.can_purge = lambda key: not self.observed.tracks(key)
        self._running: asyncio.Task[None] | None = None

    @property
    def runtime(self) -> Runtime | None:
        return self._parts.runtime

    @property
    def observed(self) -> ObservedState:
        return self.replicas.observed if self.replicas is not None else ObservedState()

    def watcher_kinds(self) -> list[watch_pb2.WatcherKind]:
        """The kind of every open Watch stream (metrics.TermCollector)."""
        return [w.kind for w in list(self.publisher.watchers.values())]

    def status(self) -> list[status_pb2.ApplicationStatusInfo]:
        """Every application's status (GetStatus), from the goals, the observed
        replicas, the autoscaler's decisions and the load reports."""
        observed = self.observed

        def observe(record: records_pb2.DeploymentRecord) -> Observed:
            key = (record.spec.application, record.spec.name)
            return (observed.counts(key), observed.planned_status(record, goal_of(record)),
                    self.autoscaler.decision(key))

        applications = cluster_status(self.deployments.live(), observe,
                                      self.applications.records(), self.builds.building,
                                      [*self.deployments.unusable.values(),
                                       *self.applications.unusable.values()])
        secrets = self.env_values()
        for app in applications:
            app.message = scrub(app.message, secrets.get(app.name, ()))
            for dep in app.deployments:
                dep.message = scrub(dep.message, secrets.get(app.name, ()))
                dep.queued_requests = self.load_reports.queued(app.name, dep.name)
                traffic = self.load_reports.traffic(app.name, dep.name)
                if traffic is not None:
                    dep.traffic.requests_per_s, dep.traffic.errors_per_s, \
                        dep.traffic.p50_ms, dep.traffic.p99_ms = traffic
        return applications

    def _traffic_figures(self) -> dict[tuple[str, str], tuple[Traffic | None, int]]:
        """Each live deployment's traffic (as status() shows it) and RUNNING
        replicas: a point of the traffic history."""
        keys = [(r.spec.application, r.spec.name) for r in self.deployments.live()]
        return {key: (self.load_reports.traffic(*key), self._running_count(key))
                for key in keys}

    def env_values(self) -> dict[str, list[str]]:
        """Each application's environment values, to scrub from texts (redact.py)."""
        return env_values(self.deployments.list(include_deleted=True),
                          self.applications.records())

    def replica_infos(self, application: str = "",
                      deployment: str = "") -> list[replica_pb2.ReplicaInfo]:
        """ListReplicas: the observed replicas, their messages scrubbed of env values."""
        infos = self.observed.replica_infos(application, deployment)
        secrets = self.env_values()
        for info in infos:
            if info.message:
                info.message = scrub(info.message, secrets.get(info.record.application, ()))
        return infos

    def status_response(self, cluster: str, leader: str,
                        controllers: list[str]) -> api.GetStatusResponse:
        """GetStatus: applications, proxies (from their Watch streams), controllers."""
        now = time.time()
        proxies = sorted((w for w in self.publisher.watchers.values()
                          if w.kind == watch_pb2.WATCHER_KIND_PROXY), key=lambda w: w.watcher_id)
        return api.GetStatusResponse(
            applications=self.status(), cluster=cluster, leader=leader,
            proxies=[status_pb2.ProxyStatus(id=w.watcher_id, address=w.address,
                                            healthy=w.healthy(now), last_seen=_stamp(w.last_sent))
                     for w in proxies],
            controllers=sorted(controllers))

    def _running_count(self, key: tuple[str, str]) -> int:
        observed = self.observed.deployments.get(key)
        return observed.counts().get("RUNNING", 0) if observed is not None else 0

    def _serving(self, application: str, name: str) -> list[ReplicaObservation]:
        return self.observed.serving(application, name)

    def _unavailable(self, record: records_pb2.DeploymentRecord) -> str:
        """Why no replica of the deployment can come, if none can (unservable.py)."""
        if self.replicas is None:  # --runtime none: replicas are not this controller's
            return ""
        key, goal = (record.spec.application, record.spec.name), goal_of(record)
        return deployment_unavailable(record, self.observed.planned_status(record, goal),
                                      len(self.observed.serving(*key)),
                                      self.observed.start_error(record, goal))

    def _unbuilt(self) -> list[tuple[application_pb2.ApplicationSpec, str]]:
        """Applications that cannot serve at all, with why (their build failed)."""
        return [(record.spec, why) for record in self.applications.live()
                if (why := application_unavailable(record))]

    def record_load(self, report: api.ReportLoadRequest) -> None:
        """Store one load report; InvalidArgument (nothing stored) on a bad one."""
        applied = self.fence.check(report.applied) if report.HasField("applied") else None
        self.load_reports.record(report.reporter_id, report.queued, report.ongoing,
                                 report.traffic, report.ejected, report.suspected,
                                 report.recent_errors)
        self.fence.reported(report.reporter_id, applied, report.applied.replace)

    def _goal_changed(self, application: str, name: str) -> None:
        if self.replicas is not None:  # visited on the next pass (reconcile/visits.py)
            self.replicas.goal_changed(application, name)
        self.autoscaler.goals_changed()
        self._deployment_changed(application, name)

    def _deployment_changed(self, application: str, name: str) -> None:
        if self._state is not None:
            self._state.refresh(application, name)
            self._note_replica_set(application, name)

    def _note_replica_set(self, application: str, name: str) -> None:
        """Tell the drain fence which replicas the deployment's published set holds."""
        snapshot = self.publisher.snapshot(replicas_key(application, name))
        if snapshot is None:
            self.fence.removed((application, name))
        else:
            self.fence.published((application, name), snapshot.snapshot_id,
                                 (e.replica_id for e in snapshot.replicas.endpoints))

    def _live_deployment(self, application: str, name: str
                         ) -> records_pb2.DeploymentRecord | None:
        try:
            return self.deployments.get(application, name)
        except NotFound:
            return None

    def _routes_changed(self, application: str) -> None:
        if self._state is not None:
            self._state.refresh_routes()

    # -- start ---------------------------------------------------------------------

    async def load(self, holding: asyncio.Future[str] | None = None) -> bool:
        """Steps 1-3; False if leadership ended first (`holding`, the lease
        keep-alive, finished)."""
        store = self._parts.store
        steps: list[Callable[[Store], Awaitable[None]]] = [self.hop.load, self.deployments.load,
                                                          self.applications.load]
        if self.replicas is not None:
            steps.append(self.replicas.recover)
        for step in steps:
            if not await self._retry_while_leading(step, store, holding):
                return False
        self._state = StatePublisher(self.publisher, self.deployments.live, self._serving,
                                     self.applications.spec,
                                     lambda: self.applications.http_options,
                                     self._unavailable, self._unbuilt,
                                     goal=self._live_deployment)
        self._state.refresh_all()
        for record in self.deployments.live():
            self._note_replica_set(record.spec.application, record.spec.name)
        return True

    async def _retry_while_leading(self, step: Callable[[Store], Awaitable[None]], store: Store,
                                   holding: asyncio.Future[str] | None) -> bool:
        attempt = 0
        while holding is None or not holding.done():
            try:
                await step(store)
                return True
            except NotLeader:
                return False  # the term is over; hold() says why
            except (StoreUnavailable, Unavailable) as e:
                attempt += 1
                logger.warning("cannot load state from the store, retrying: %s", e)
                await self._parts.clock.sleep(BACKOFF.delay(attempt))
        return False

    def start(self) -> None:
        self._running = asyncio.create_task(self.loop.run(), name="reconcile")

    # -- stop ------------------------------------------------------------------------

    async def stop(self) -> None:
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._running
        await self.loop.cancel_all()  # work that recovery started, even if the loop never ran
        await self.autoscaler.close()  # custom policies' processes
        self.publisher.close()  # Watch streams notice and end

    async def wait_replicas_gone(self, timeout_s: float) -> bool:
        """Wait until no replica is tracked (Shutdown); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self.observed.empty() and loop.time() < deadline:
            await asyncio.sleep(0.1)
        return self.observed.empty()
