"""Leader election, failover, fencing and restart with real controllers and etcd."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any

import grpc
import pytest

from servefleet._private.external_servers import EtcdServer
from servefleet._private.testing import ControllerProcess
from servefleet.client import ControllerClient, ControllerError
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.store.etcd import EtcdStore
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, records_pb2
from servefleet.v1 import deployment_pb2 as d

pytestmark = pytest.mark.slow


def spec(name: str) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="examples.model:Model")


def etcd_records(endpoint: str, cluster: str) -> dict[str, records_pb2.DeploymentRecord]:
    """The deployment records as etcd holds them, read without any controller."""
    async def read() -> dict[str, records_pb2.DeploymentRecord]:
        store = EtcdStore([endpoint])
        try:
            found = {}
            for kv in await store.list_prefix(ClusterKeys(cluster).deployments):
                record = records_pb2.DeploymentRecord.FromString(kv.value)
                found[record.spec.name] = record
            return found
        finally:
            await store.close()

    return asyncio.run(read())


def etcd_get(endpoint: str, key: str):
    async def read():
        store = EtcdStore([endpoint])
        try:
            return await store.get(key)
        finally:
            await store.close()

    return asyncio.run(read())


class DeployLoad:
    """A client issuing Deploys of new names back to back, recording the acknowledged."""

    def __init__(self, addresses: list[str]) -> None:
        self.acked: list[str] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._client = ControllerClient(addresses, timeout=30, rpc_timeout=2)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            name = f"d{n}"
            n += 1
            try:
                self._client.deploy(spec(name))
                self.acked.append(name)
            except ControllerError as e:
                self.errors.append(f"{name}: {e}")

    def __enter__(self) -> DeployLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._client.close()

    def wait_acked(self, count: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            assert time.monotonic() < deadline, f"only {len(self.acked)} deploys acknowledged"
            time.sleep(0.01)


def test_sigkill_leader_under_load_loses_nothing(etcd, etcd_fleet) -> None:
    ttl = 2.0
    etcd_fleet.start(3, lease_ttl=ttl)
    leader = etcd_fleet.leader()
    with DeployLoad(etcd_fleet.addresses()) as load:
        load.wait_acked(20)
        killed_at = time.monotonic()
        leader.kill()
        new_leader = etcd_fleet.leader(timeout=ttl + 10)
        takeover = time.monotonic() - killed_at
        acked_before = len(load.acked)
        load.wait_acked(acked_before + 20)
    assert new_leader is not leader
    assert takeover <= ttl + 1.0, f"standby took {takeover:.2f}s to lead (TTL {ttl}s)"
    assert load.errors == []
    stored = etcd_records(etcd.endpoint, etcd_fleet.cluster)
    missing = [name for name in load.acked if name not in stored]
    assert missing == [], f"acknowledged deploys lost: {missing}"
    with ControllerClient(etcd_fleet.addresses()) as client:
        listed = {r.spec.name for r in client.list()}
    assert set(load.acked) <= listed


def test_sigterm_leader_resigns_and_standby_takes_over_at_once(etcd_fleet) -> None:
    ttl = 5.0
    etcd_fleet.start(2, lease_ttl=ttl)
    leader = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses()) as client:
        client.deploy(spec("before"))
        stopped_at = time.monotonic()
        assert leader.stop() == 0
        new_leader = etcd_fleet.leader(timeout=ttl + 10)
        takeover = time.monotonic() - stopped_at
        assert new_leader is not leader
        # Resigning deletes the key, so no one waits out the lease.
        assert takeover < ttl, f"takeover took {takeover:.2f}s: the leader did not resign"
        assert [r.spec.name for r in client.list()] == ["before"]
    assert "lost leadership: resigned" in leader.logs()


def test_stopped_leader_is_fenced_after_resuming(etcd, etcd_fleet) -> None:
    ttl = 2.0
    etcd_fleet.start(2, lease_ttl=ttl)
    old = etcd_fleet.leader()
    (standby,) = [p for p in etcd_fleet.started if p is not old]
    with ControllerClient(etcd_fleet.addresses()) as client:
        client.deploy(spec("before"))

    old.signal(signal.SIGSTOP)
    try:
        assert etcd_fleet.leader(timeout=ttl + 10) is standby
        leader_kv = etcd_get(etcd.endpoint, ClusterKeys(etcd_fleet.cluster).leader)
        assert leader_kv is not None and leader_kv.value.decode() == standby.address
        with ControllerClient([standby.address]) as client:
            client.deploy(spec("after"))
        snapshot = etcd_records(etcd.endpoint, etcd_fleet.cluster)

        # A write sent to the stopped leader waits in its socket until it resumes.
        outcome: dict[str, Any] = {}

        def write_to_old_leader() -> None:
            with grpc.insecure_channel(old.address) as channel:
                stub = controller_pb2_grpc.ControllerServiceStub(channel)
                try:
                    stub.Deploy(api.DeployRequest(spec=spec("from-old-leader")), timeout=20)
                    outcome["result"] = "acknowledged"
                except grpc.RpcError as e:
                    outcome["result"] = e.code()
                    outcome["metadata"] = e.trailing_metadata()

        writer = threading.Thread(target=write_to_old_leader)
        writer.start()
        time.sleep(0.5)
    finally:
        old.signal(signal.SIGCONT)
    writer.join(30)

    assert outcome["result"] == grpc.StatusCode.UNAVAILABLE
    assert ("servefleet-leader", standby.address) in outcome.get("metadata", ())
    stored = etcd_records(etcd.endpoint, etcd_fleet.cluster)
    assert stored == snapshot, "etcd changed after the new leader's election"
    after_kv = etcd_get(etcd.endpoint, ClusterKeys(etcd_fleet.cluster).leader)
    assert after_kv == leader_kv, "the old leader touched the leader key"
    assert not old.is_leader()
    # The stopped leader notices its lapsed lease or has its write refused by
    # the guard, whichever comes first after SIGCONT; tests/test_election.py
    # drives the guard path alone.
    assert "lost leadership" in old.logs()
    assert etcd_fleet.leader() is standby


def test_restart_of_every_controller_keeps_state(fleet) -> None:
    fleet.start(1)
    fleet.leader()
    with ControllerClient(fleet.addresses()) as client:
        client.deploy(spec("kept"))
        client.deploy(d.DeploymentSpec(name="tuned", application="app", route_prefix="/t",
                                       import_path="m:C", version="v7",
                                       replica_config=d.ReplicaConfig(num_replicas=3)))
        client.deploy(spec("gone"))
        client.delete(["gone"])
        before = client.list(include_deleted=True)
        status_before = client.status().applications
    fleet.stop_all()

    fleet.start(1)
    fleet.leader()
    with ControllerClient(fleet.addresses()[-1:]) as client:
        after = client.list(include_deleted=True)
        status_after = client.status().applications
    assert [r.SerializeToString(deterministic=True) for r in after] == [
        r.SerializeToString(deterministic=True) for r in before]
    assert list(status_after) == list(status_before)


def test_leader_survives_an_etcd_pause(tmp_path) -> None:
    """etcd stopped for longer than the lease: the controller must lead again afterwards."""
    server = EtcdServer().start()
    proc = ControllerProcess(server.url, cluster="pause", lease_ttl=2, runtime="none",
                             log_dir=tmp_path).start()
    try:
        with ControllerClient([proc.address], timeout=30, rpc_timeout=1) as client:
            client.deploy(spec("before"))
            assert server.proc is not None
            server.proc.send_signal(signal.SIGSTOP)
            time.sleep(3.0)
            server.proc.send_signal(signal.SIGCONT)
            # Outcome unknown during the pause; afterwards it must be served again.
            client.deploy(spec("after"))
            assert {r.spec.name for r in client.list()} == {"before", "after"}
        assert proc.is_leader(), proc.logs()
    finally:
        if server.proc is not None:
            server.proc.send_signal(signal.SIGCONT)
        proc.stop()
        server.stop()
