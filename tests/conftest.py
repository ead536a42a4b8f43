"""Shared fixtures: a real etcd on free loopback ports, and store instances."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from k8s_cluster import k8s_cluster  # noqa: F401  (scripts/k8s's cluster, once a session)

from servefleet._private.external_servers import EtcdServer
from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port
from servefleet.client import ControllerClient
from servefleet.controller.runtime.process import scan
from servefleet.controller.store import Store
from servefleet.controller.store.etcd import EtcdStore
from servefleet.controller.store.sqlite import SqliteStore


@pytest.fixture(scope="session")
def etcd() -> Iterator[EtcdServer]:
    """One etcd for the whole run; tests isolate themselves by cluster name."""
    server = EtcdServer().start()
    try:
        yield server
    finally:
        server.stop()


_counter = itertools.count()


def replica_pids(cluster: str) -> list[int]:
    """Replica processes of `cluster` running on this host."""
    return [int(r.handle.split(":")[0]) for r, _ in scan(cluster)]


@pytest.fixture
def cluster() -> str:
    """A cluster name no other test uses, so tests can share one etcd."""
    return f"t{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(params=["sqlite", "etcd"])
async def store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[Store]:
    """Each Store implementation in turn: the contract suite runs on both."""
    if request.param == "etcd":
        server: EtcdServer = request.getfixturevalue("etcd")
        instance: Store = EtcdStore([server.endpoint])
    else:
        instance = SqliteStore(tmp_path / "state.db")
    try:
        yield instance
    finally:
        await instance.close()


class ControllerFleet:
    """Starts controller processes for one test and stops them all afterwards."""

    def __init__(self, store_url: str, cluster: str, log_dir: str) -> None:
        self.store_url = store_url
        self.cluster = cluster
        self.log_dir = log_dir
        self.started: list[ControllerProcess] = []

    def start(self, count: int = 1, *, lease_ttl: float = 5.0, runtime: str = "none",
              wait: bool = True) -> list[ControllerProcess]:
        """Start controllers; by default control-plane only (no replicas are run)."""
        # Tests put code in tmp dirs: the deploy policy is tested on its own (test_policy.py).
        procs = [ControllerProcess(self.store_url, cluster=self.cluster, lease_ttl=lease_ttl,
                                   runtime=runtime, log_dir=self.log_dir,
                                   extra_args=["--allow-working-dir", "/", "--allow-image", "*"])
                 for _ in range(count)]
        for proc in procs:
            proc.start(wait=False)
            self.started.append(proc)
        if wait:
            for proc in procs:
                proc.wait_serving_health(timeout=30)
        return procs

    def leader(self, timeout: float = 30.0) -> ControllerProcess:
        """The one controller that reports itself the serving leader."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leaders = [p for p in self.started if p.proc and p.proc.poll() is None
                       and p.is_leader()]
            if len(leaders) == 1:
                return leaders[0]
            assert len(leaders) <= 1, f"two serving leaders: {[p.address for p in leaders]}"
            time.sleep(0.05)
        raise TimeoutError("no controller became the serving leader")

    def addresses(self) -> list[str]:
        return [p.address for p in self.started]

    def stop_all(self) -> None:
        for proc in self.started:
            proc.stop()
        # Last resort after a failed test: replicas outlive controllers by design.
        for pid in replica_pids(self.cluster):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def dump_logs(self) -> str:
        return "\n".join(f"--- {p.address}\n{p.logs()}" for p in self.started)


@pytest.fixture(params=["etcd", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A store URL of each kind: etcd (the shared test server) and a fresh sqlite file."""
    if request.param == "etcd":
        return request.getfixturevalue("etcd").url
    return f"sqlite://{tmp_path}/state.db"


@pytest.fixture
def etcd_url(etcd: EtcdServer) -> str:
    return etcd.url


def _fleet(url: str, cluster: str, tmp_path, request: pytest.FixtureRequest
           ) -> Iterator[ControllerFleet]:
    fleet = ControllerFleet(url, cluster, str(tmp_path))
    try:
        yield fleet
    finally:
        fleet.stop_all()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(fleet.dump_logs())


@pytest.fixture
def fleet(store_url: str, cluster: str, tmp_path, request) -> Iterator[ControllerFleet]:
    """Controllers on each store kind in turn."""
    yield from _fleet(store_url, cluster, tmp_path, request)


@pytest.fixture
def etcd_fleet(etcd_url: str, cluster: str, tmp_path, request) -> Iterator[ControllerFleet]:
    """Controllers on the test etcd (for elections among several)."""
    yield from _fleet(etcd_url, cluster, tmp_path, request)


@pytest.fixture
def sqlite_fleet(cluster: str, tmp_path, request) -> Iterator[ControllerFleet]:
    """Controllers on a fresh sqlite store (the embedded default), for tests of
    the data plane that need not run on both stores."""
    yield from _fleet(f"sqlite://{tmp_path}/state.db", cluster, tmp_path, request)


@pytest.fixture
def grpc_cluster(sqlite_fleet, tmp_path):
    """A controller (process runtime) and a proxy with a gRPC port; yields
    (client, proxy, grpc target)."""
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    port = free_port()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--grpc-listen", f"127.0.0.1:{port}"]).start()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        yield client, proxy, f"127.0.0.1:{port}"
        proxy.stop()
        client.shutdown()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def served(sqlite_fleet, tmp_path):
    """A controller with the process runtime on the embedded store (what
    serves requests does not touch the store: the stores' own tests run on
    both), and a way to start proxies on it; yields (client, start_proxy).
    Shuts the controller (and replicas) down after."""
    yield from _served(sqlite_fleet, tmp_path, [])


@pytest.fixture(params=["python", "haproxy"])
def engine(request: pytest.FixtureRequest) -> str:
    """Each proxy engine in turn (proxy --engine): the behaviour tests run on both."""
    return request.param


@pytest.fixture
def served_by(sqlite_fleet, engine, tmp_path):
    """`served` on the embedded store, its proxies of each engine in turn."""
    yield from _served(sqlite_fleet, tmp_path, ["--engine", engine])


def _served(fleet, tmp_path, proxy_args: list[str]):
    fleet.start(1, runtime="process")
    fleet.leader()
    proxies: list[ProxyProcess] = []

    def proxy(*args: str) -> ProxyProcess:
        started = ProxyProcess(fleet.addresses(), log_dir=tmp_path,
                               extra_args=[*proxy_args, *args])
        proxies.append(started.start())
        return started

    with ControllerClient(fleet.addresses(), timeout=30) as client:
        yield client, proxy
    for p in proxies:
        p.stop()
    with ControllerClient(fleet.addresses(), timeout=30) as client:  # a test may restart it
        client.shutdown()


@pytest.fixture(scope="session")
def node_grpc() -> str:
    """NODE_PATH with @grpc/grpc-js and @grpc/proto-loader (scripts/setup installs them)."""
    modules = Path(__file__).resolve().parent.parent / ".build" / "node" / "node_modules"
    if not (modules / "@grpc" / "grpc-js").is_dir() or shutil.which("node") is None:
        pytest.fail("node and the Node gRPC packages are missing: run scripts/setup")
    return str(modules)


@pytest.fixture(autouse=True)
def _no_replica_identity_left_behind():
    """Tests that build a Replica in this process set the process's replica
    identity (servefleet._private.replica_context); the next test is no replica."""
    yield
    from servefleet._private import replica_context

    replica_context.clear()
