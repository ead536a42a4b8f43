"""In-memory stand-ins for unit tests and benchmarks of pure controller logic.

`FakeClock` moves only when told; `FakeRuntime` "runs" replicas as entries in
a dict; `FakeReplicaClient` answers for them; `FakeControlPlane` makes real
leader terms (controller/term.py) over them and an in-memory store. They are
injected through constructors, never patched in. Integration tests use the
real runtime and real replica processes instead. Not shipped: this lives
with the tests (bench/replicas.py imports it from here too).
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
from dataclasses import dataclass
from typing import Any

from servefleet.controller.clock import Clock
from servefleet.controller.election import LeaderElection
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.reconcile.builder import BuildResult
from servefleet.controller.reconcile.replica_client import ReplicaCallError
from servefleet.controller.runtime import ReplicaLaunch, RuntimeReplica
from servefleet.controller.store import StoreUnavailable
from servefleet.controller.store.sqlite import SqliteStore
from servefleet.controller.term import LeaderTerm, TermParts
from servefleet.v1 import application_pb2, replica_pb2


class FakeClock(Clock):
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


class FlakyStore:
    """A real store whose next `failures` transactions raise StoreUnavailable."""

    def __init__(self, inner: SqliteStore, failures: int = 0) -> None:
        self._inner, self.failures = inner, failures

    async def txn(self, guards, ops):
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("injected")
        return await self._inner.txn(guards, ops)

    def __getattr__(self, name):
        return getattr(self._inner, name)


@dataclass(slots=True)
class FakeLaunch:
    """What the fake replica client needs of a launch (kept small: the tick
    benchmark holds 10,000 of them)."""

    handle: str
    import_path: str
    user_config_json: str
    max_ongoing_requests: int
    # Its rank (-1: none) and world size, as a replica reports them (ranks).
    rank: int = -1
    world_size: int = 0


class FakeRuntime:
    name = "fake"

    def __init__(self) -> None:
        self.replicas: dict[str, RuntimeReplica] = {}
        self.launches: dict[str, FakeLaunch] = {}  # by control address
        self._ids = itertools.count(1)
        # Import paths whose replicas fail at startup, with the error they report.
        self.broken: dict[str, str] = {}
        # Import paths whose replicas stay loading (a constructor that never ends).
        self.loading: set[str] = set()

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        n = next(self._ids)
        replica = RuntimeReplica(
            replica_id=launch.replica_id, cluster=launch.cluster,
            application=launch.application, deployment=launch.deployment,
            version=launch.version, handle=f"fake-{n}", control_address=f"fake:{n}",
            http_address=f"fake-http:{n}")
        self.replicas[replica.handle] = replica
        self.launches[replica.control_address] = FakeLaunch(
            replica.handle, launch.settings["import_path"],
            launch.settings["user_config_json"], launch.settings["max_ongoing_requests"],
            launch.settings.get("rank", -1), launch.settings.get("world_size", 0))
        return replica

    async def stop(self, handle: str, timeout_s: float) -> None:
        replica = self.replicas.get(handle)
        if replica is not None:
            replica.alive = False
            replica.exit_code = 0

    def kill(self, handle: str) -> None:
        self.replicas[handle].alive = False
        self.replicas[handle].exit_code = -9

    async def list(self, cluster: str) -> builtins.list[RuntimeReplica]:
        return [r for r in self.replicas.values() if r.alive and r.cluster == cluster]

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        return self.replicas.get(handle)

    def logs(self, replica_id: str, lines: int = 20) -> str:
        return ""

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        return "", cursor

    def cleanup(self, replica_id: str) -> None:
        pass

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        return []

    def close(self) -> None:
        pass

    def alive(self) -> builtins.list[RuntimeReplica]:
        return [r for r in self.replicas.values() if r.alive]


class FakeReplicaClient:
    """Answers for FakeRuntime's replicas: ready at once unless their import path is broken."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self._runtime = runtime
        self.unhealthy: set[str] = set()  # control addresses whose health checks fail
        # Control addresses that answer nothing: a check with a long timeout
        # hangs (until cancelled), a short one (<= 5 s) times out at once.
        self.hung: set[str] = set()
        self.reconfigured: list[str] = []
        # (control address, timeout) of each health check made.
        self.checks: list[tuple[str, float]] = []

    def _find(self, address: str) -> FakeLaunch:
        launch = self._runtime.launches.get(address)
        if launch is None or not self._runtime.replicas[launch.handle].alive:
            raise ReplicaCallError("connection refused")
        return launch

    async def metadata(self, address: str, timeout: float) -> replica_pb2.GetMetadataResponse:
        launch = self._find(address)
        error = self._runtime.broken.get(launch.import_path)
        if error:
            return replica_pb2.GetMetadataResponse(
                phase=replica_pb2.REPLICA_PHASE_FAILED, error=error, traceback="Traceback: ...")
        if launch.import_path in self._runtime.loading:
            return replica_pb2.GetMetadataResponse(phase=replica_pb2.REPLICA_PHASE_LOADING)
        return replica_pb2.GetMetadataResponse(
            phase=replica_pb2.REPLICA_PHASE_READY, user_config_json=launch.user_config_json,
            max_ongoing_requests=launch.max_ongoing_requests,
            rank=launch.rank if launch.rank >= 0 else None, world_size=launch.world_size)

    async def check_health(self, address: str, timeout: float, replica_id: str = "") -> None:
        self._find(address)
        self.checks.append((address, timeout))
        if address in self.hung:
            if timeout > 5:
                await asyncio.Event().wait()
            raise ReplicaCallError(f"CheckHealth timed out after {timeout:g}s")
        if address in self.unhealthy:
            raise ReplicaCallError("check_health raised RuntimeError: sick")

    async def reconfigure(self, address: str, user_config_json: str,
                          max_ongoing_requests: int, timeout: float,
                          replica_id: str = "", rank: int | None = None,
                          world_size: int = 0) -> None:
        launch = self._find(address)
        self.reconfigured.append(address)
        if rank is not None:
            launch.rank = rank
        if world_size:
            launch.world_size = world_size

    async def drain(self, address: str, wait_loop_s: float, timeout_s: float,
                    replica_id: str = "") -> None:
        self._find(address)

    async def forget(self, address: str) -> None:
        pass


async def no_build(spec: application_pb2.ApplicationSpec) -> BuildResult:
    return BuildResult(None, "this control plane builds nothing")


class FakeControlPlane:
    """Leader terms over an in-memory store, a fake clock, runtime and replica client.

    `lead()` plays a new leader term (resigning the previous one), as after a
    failover; the store, runtime and clock carry over. `build` stands in for
    the application build step.
    """

    def __init__(self, cluster: str = "unit", build=no_build) -> None:
        # Set `store.failures` to make the next transactions fail.
        self.store = FlakyStore(SqliteStore(":memory:"))
        self.keys = ClusterKeys(cluster)
        self.cluster = cluster
        self.clock = FakeClock()
        self.runtime = FakeRuntime()
        self.client = FakeReplicaClient(self.runtime)
        self.build = build
        self.election: LeaderElection | None = None
        self.term: LeaderTerm | None = None

    async def lead(self, max_history: int = 1000, **parts: Any) -> LeaderTerm:
        """A new term; `parts`: more TermParts fields (kube_applications, say)."""
        if self.term is not None:
            await self.term.stop()
        if self.election is not None:
            await self.election.resign()
        self.election = LeaderElection(self.store, self.keys.leader, "me:1", ttl=60)
        token = await self.election.campaign()
        term_parts = TermParts(self.cluster, self.keys, self.store, self.election, self.clock,
                               self.runtime, self.client, lambda: [], self.build,
                               max_history=max_history, **parts)
        self.term = LeaderTerm(token, term_parts)
        assert await self.term.load()
        return self.term

    async def settle(self, term: LeaderTerm, ticks: int = 30, step_s: float = 0.6) -> None:
        """Run passes, advancing the clock and letting each pass's work finish."""
        for _ in range(ticks):
            self.clock.advance(step_s)
            await term.loop.run_pass()
            await asyncio.sleep(0)
            await term.loop.wait_idle()
        await term.loop.run_pass()  # take in what the last work observed

    async def close(self) -> None:
        if self.term is not None:
            await self.term.stop()
        await self.store.close()
