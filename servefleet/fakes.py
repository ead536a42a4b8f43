"""In-memory stand-ins for unit tests and benchmarks of pure controller logic.

`FakeClock` moves only when told; `FakeRuntime` "runs" replicas as entries in
a dict; `FakeReplicaClient` answers for them. They are injected through
constructors (Reconciler, ReplicaOps), never patched in. Integration tests
use the real runtime and real replica processes instead.
"""

from __future__ import annotations

import asyncio
import itertools

from servefleet.controller.election import FencedStore, LeaderElection
from servefleet.controller.goals.deployments import DeploymentTable
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.reconcile.replica_client import ReplicaCallError
from servefleet.controller.reconcile.replica_ops import ReplicaOps
from servefleet.controller.reconcile.replicas import Reconciler
from servefleet.controller.runtime import ReplicaLaunch, RuntimeReplica
from servefleet.controller.store.sqlite import SqliteStore
from servefleet.v1 import replica_pb2


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(0)  # yield, without waiting: tests advance `now` themselves

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeRuntime:
    name = "fake"

    def __init__(self) -> None:
        self.replicas: dict[str, RuntimeReplica] = {}
        self.launches: dict[str, ReplicaLaunch] = {}
        self._ids = itertools.count(1)
        # Import paths whose replicas fail at startup, with the error they report.
        self.broken: dict[str, str] = {}

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        n = next(self._ids)
        replica = RuntimeReplica(
            replica_id=launch.replica_id, cluster=launch.cluster,
            application=launch.application, deployment=launch.deployment,
            version=launch.version, handle=f"fake-{n}", control_address=f"fake:{n}",
            http_address=f"fake-http:{n}")
        self.replicas[replica.handle] = replica
        self.launches[replica.handle] = launch
        return replica

    async def stop(self, handle: str, timeout_s: float) -> None:
        replica = self.replicas.get(handle)
        if replica is not None:
            replica.alive = False
            replica.exit_code = 0

    def kill(self, handle: str) -> None:
        self.replicas[handle].alive = False
        self.replicas[handle].exit_code = -9

    async def list(self, cluster: str) -> list[RuntimeReplica]:
        return [r for r in self.replicas.values() if r.alive and r.cluster == cluster]

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        return self.replicas.get(handle)

    def logs(self, replica_id: str, lines: int = 20) -> str:
        return ""

    def cleanup(self, replica_id: str) -> None:
        pass

    async def prune(self, cluster: str, keep: set[str]) -> list[str]:
        return []

    def alive(self) -> list[RuntimeReplica]:
        return [r for r in self.replicas.values() if r.alive]


class FakeReplicaClient:
    """Answers for FakeRuntime's replicas: ready at once unless their import path is broken."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self._runtime = runtime
        self.unhealthy: set[str] = set()  # control addresses whose health checks fail
        self.reconfigured: list[str] = []

    def _find(self, address: str) -> tuple[RuntimeReplica, ReplicaLaunch]:
        for handle, replica in self._runtime.replicas.items():
            if replica.control_address == address and replica.alive:
                return replica, self._runtime.launches[handle]
        raise ReplicaCallError("connection refused")

    async def metadata(self, address: str, timeout: float) -> replica_pb2.GetMetadataResponse:
        _, launch = self._find(address)
        error = self._runtime.broken.get(launch.settings["import_path"])
        if error:
            return replica_pb2.GetMetadataResponse(
                phase=replica_pb2.REPLICA_PHASE_FAILED, error=error, traceback="Traceback: ...")
        return replica_pb2.GetMetadataResponse(
            phase=replica_pb2.REPLICA_PHASE_READY,
            user_config_json=launch.settings["user_config_json"],
            max_ongoing_requests=launch.settings["max_ongoing_requests"])

    async def check_health(self, address: str, timeout: float, replica_id: str = "") -> None:
        self._find(address)
        if address in self.unhealthy:
            raise ReplicaCallError("check_health raised RuntimeError: sick")

    async def reconfigure(self, address: str, user_config_json: str,
                          max_ongoing_requests: int, timeout: float,
                          replica_id: str = "") -> None:
        self._find(address)
        self.reconfigured.append(address)

    async def drain(self, address: str, wait_loop_s: float, timeout_s: float,
                    replica_id: str = "") -> None:
        self._find(address)

    async def forget(self, address: str) -> None:
        pass


class FakeControlPlane:
    """A leader's table and reconciler over an in-memory store, fake clock and runtime.

    `lead()` plays a new leader term (resigning the previous one), as after a
    failover; the store, runtime and clock carry over.
    """

    def __init__(self, cluster: str = "unit") -> None:
        self.store = SqliteStore(":memory:")
        self.keys = ClusterKeys(cluster)
        self.cluster = cluster
        self.clock = FakeClock()
        self.runtime = FakeRuntime()
        self.client = FakeReplicaClient(self.runtime)
        self.election: LeaderElection | None = None

    async def lead(self, max_history: int = 1000) -> tuple[DeploymentTable, Reconciler]:
        if self.election is not None:
            await self.election.resign()
        self.election = LeaderElection(self.store, self.keys.leader, "me:1", ttl=60)
        token = await self.election.campaign()
        fenced = FencedStore(self.store, self.election, self.keys.leader, token)
        table = DeploymentTable(self.keys, fenced, self.store, self.clock,
                                max_history=max_history)
        await table.load(self.store)
        ops = ReplicaOps(self.cluster, self.keys, fenced, self.runtime, self.client)
        reconciler = Reconciler(self.keys, ops, lambda: table.list(include_deleted=True),
                                self.clock)
        table.can_purge = lambda key: not reconciler.views.get(key)
        await reconciler.recover(self.store)
        return table, reconciler

    async def settle(self, reconciler: Reconciler, ticks: int = 30,
                     step_s: float = 0.6) -> None:
        """Run ticks, advancing the clock and letting each tick's work finish."""
        for _ in range(ticks):
            self.clock.advance(step_s)
            await reconciler.tick()
            await asyncio.sleep(0)
            await reconciler.wait_tasks()

    async def close(self) -> None:
        await self.store.close()
