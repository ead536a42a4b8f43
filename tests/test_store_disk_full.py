"""The embedded sqlite store's disk filling up (issue 38).

With real processes, the store lives on a 4 MiB tmpfs that
bench/nemesis/disk_full.py mounts and fills (the chaos suite's nemesis uses
the same helper). While the disk is full: Deploy and Delete are refused at
once with RESOURCE_EXHAUSTED naming the full disk, and change nothing; the
leader keeps its lease (renewals rewrite rows in place and need no new
space), so the reconcile loop goes on and retries what it could not write;
the proxy keeps serving. Once space is freed, writes work again without a
restart, and the file passes sqlite's integrity check with every
acknowledged write in it.

Then the replica reconciler under a fake clock: a replica it cannot even
register while the disk is full leaves no stop behind waiting for space.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from fakes import FakeControlPlane, FlakyStore

from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
from servefleet.client import ControllerClient, ControllerError
from servefleet.controller.reconcile.planner import RUNNING
from servefleet.controller.runtime.process import scan
from servefleet.controller.store import Put, StoreFull
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import records_pb2, replica_pb2, status_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from nemesis.disk_full import DiskFiller, MountRefused, small_tmpfs

APPS = str(Path(__file__).parent / "apps")
LEASE_TTL_S = 2.0


@pytest.fixture
def store_disk(tmp_path) -> Iterator[Path]:
    """A 4 MiB tmpfs for the store, unmounted after the test."""
    try:
        with small_tmpfs(tmp_path / "store", "4m") as disk:
            yield disk
    except MountRefused as e:
        pytest.skip(f"filling a disk safely needs a tmpfs of our own: {e}")


def echo(label: str) -> d.DeploymentSpec:
    return d.DeploymentSpec(name="Echo", application="a", import_path="echo_app:Echo",
                            route_prefix="/echo", init_kwargs_json=json.dumps({"label": label}),
                            runtime=d.RuntimeOptions(working_dir=APPS))


def hello() -> d.DeploymentSpec:
    return d.DeploymentSpec(name="Hello", application="a", import_path="echo_app:hello",
                            route_prefix="/hello", runtime=d.RuntimeOptions(working_dir=APPS))


def healthy(client: ControllerClient, *names: str) -> bool:
    states = {dep.name: dep.status for app in client.status().applications
              for dep in app.deployments}
    return all(states.get(n) == status_pb2.DEPLOYMENT_STATUS_HEALTHY for n in names)


def label(proxy: ProxyProcess) -> str | None:
    reply = httpx.get(proxy.url + "/echo", timeout=5)
    return reply.json()["label"] if reply.status_code == 200 else None


def refused_for_space(call) -> str:
    """Run `call`, which must be refused at once for want of disk space; the message."""
    began = time.monotonic()
    with pytest.raises(ControllerError) as refused:
        call()
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value.details
    assert time.monotonic() - began < 5  # answered, not retried until the client's timeout
    return refused.value.details


def stored_records(db: Path, cluster: str) -> dict[str, records_pb2.DeploymentRecord]:
    """Deployment records in the store's file, by name; after an integrity check."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = conn.execute("SELECT key, value FROM kv WHERE key LIKE ?",
                            (f"/servefleet/{cluster}/deployments/%",)).fetchall()
    return {key.rsplit("/", 1)[1]: records_pb2.DeploymentRecord.FromString(value)
            for key, value in rows}


@pytest.mark.slow
def test_a_full_disk_refuses_writes_keeps_serving_and_recovers(store_disk, tmp_path,
                                                               cluster) -> None:
    controller = ControllerProcess(f"sqlite://{store_disk}/state.db", cluster=cluster,
                                   lease_ttl=LEASE_TTL_S, log_dir=tmp_path)
    proxy = ProxyProcess([controller.address], log_dir=tmp_path)
    client = ControllerClient([controller.address], timeout=30)
    filler = DiskFiller(store_disk)
    try:
        controller.start()
        acknowledged = {"Echo": client.deploy(echo("one")).version,
                        "Hello": client.deploy(hello()).version}
        wait_for(lambda: healthy(client, "Echo", "Hello"), 60, "both deployments healthy")
        proxy.start()
        wait_for(lambda: label(proxy) == "one", 30, "Echo routed")
        (doomed,) = client.replicas(deployment="Hello")

        # 1. Fill the disk: writes that add data are refused, and change nothing.
        assert filler.fill() > 0 and filler.free_bytes() == 0
        message = refused_for_space(lambda: client.deploy(echo("two")))
        assert "disk is full" in message and str(store_disk) in message
        refused_for_space(lambda: client.delete(["Hello"], application="a"))
        assert client.get("Echo", "a").version == acknowledged["Echo"]
        assert not client.get("Hello", "a").deleted

        # 2. The reconcile loop goes on: it notices a replica that died and
        # tries to replace it, but cannot register the new one; logged, retried.
        os.kill(int(doomed.record.handle.split(":")[0]), signal.SIGKILL)
        wait_for(lambda: any("Hello" in line and "disk is full" in line
                             for line in controller.logs().splitlines()), 30,
                 "the failed replacement logged")

        # 3. Serving goes on, and the leader keeps its lease for several TTLs.
        until = time.monotonic() + 3 * LEASE_TTL_S
        while time.monotonic() < until:
            assert label(proxy) == "one"
            assert controller.is_leader()
            time.sleep(0.2)
        assert controller.proc is not None and controller.proc.poll() is None
        assert "lost leadership" not in controller.logs()

        # 4. Space freed: writes work again, without a restart.
        filler.free()
        acknowledged["Echo"] = client.deploy(echo("three")).version
        wait_for(lambda: label(proxy) == "three", 60, "the new Echo routed")
        wait_for(lambda: [r for r in client.replicas(deployment="Hello")
                          if r.record.replica_id != doomed.record.replica_id
                          and r.state == replica_pb2.REPLICA_STATE_RUNNING], 60,
                 "Hello's replacement running")
        assert httpx.get(proxy.url + "/hello", timeout=5).text == "hello world"

        # 5. Nothing corrupted, every acknowledged write there.
        controller.stop()
        records = stored_records(store_disk / "state.db", cluster)
        assert {name: r.version for name, r in records.items()} == acknowledged
        assert json.loads(records["Echo"].spec.init_kwargs_json) == {"label": "three"}
    finally:
        proxy.stop()
        client.close()
        controller.stop()
        for replica, _ in scan(cluster):  # replicas outlive their controller by design
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(replica.handle.split(":")[0]), signal.SIGKILL)


class FullDisk(FlakyStore):
    """A real store that, while `full`, refuses every write adding data, as
    the sqlite store does on a full disk; deletes and leases go through."""

    full = False

    async def txn(self, guards, ops):
        if self.full and any(isinstance(op, Put) for op in ops):
            raise StoreFull("injected: the store's disk is full")
        return await super().txn(guards, ops)


async def test_a_replica_that_could_not_be_registered_leaves_no_stop_behind() -> None:
    world = FakeControlPlane()
    world.store = disk = FullDisk(world.store._inner)
    try:
        term = await world.lead()
        await term.deployments.deploy(d.DeploymentSpec(
            name="A", import_path="m:C",
            replica_config=d.ReplicaConfig(num_replicas=1, health_check_period_s=1)))
        await world.settle(term)
        (replica,) = world.runtime.alive()
        disk.full = True
        world.runtime.kill(replica.handle)
        # 10 s of passes, a replacement tried on each: none may linger as a
        # stop waiting to mark a record that was never written.
        await world.settle(term, ticks=100, step_s=0.1)
        tracked = term.observed.deployments[("default", "A")].replicas
        assert len(tracked) <= 2, [(r.view.replica_id, r.view.state) for r in tracked]
        assert not world.runtime.alive()
        disk.full = False
        await world.settle(term)
        tracked = term.observed.deployments[("default", "A")].replicas
        assert [r.view.state for r in tracked] == [RUNNING]
        assert len(world.runtime.alive()) == 1
        assert len(await world.store.list_prefix(world.keys.replicas)) == 1
    finally:
        await world.close()
