"""The reconcile loop under a fake clock, runtime and replica client (unit tests)."""

from __future__ import annotations

import asyncio

import pytest

from servefleet.controller.reconcile.observed import planned_status
from servefleet.controller.reconcile.planner import ReplicaView
from servefleet.controller.reconcile.replicas import Reconciler
from servefleet.controller.runtime import ReplicaLaunch
from servefleet.controller.store import StoreUnavailable
from servefleet.fakes import FakeClock, FakeControlPlane
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, status_pb2

RUNNING = replica_pb2.REPLICA_STATE_RUNNING
DS = status_pb2.DeploymentStatus


async def settle(reconciler: Reconciler, clock: FakeClock, ticks: int = 30) -> None:
    for _ in range(ticks):
        clock.advance(0.6)
        await reconciler.tick()
        await asyncio.sleep(0)
        await reconciler.wait_tasks()


def spec(name: str, replicas: int, **fields) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path=fields.pop("import_path", "m:C"),
                            replica_config=d.ReplicaConfig(num_replicas=replicas,
                                                           health_check_period_s=1),
                            **fields)


def running_ids(reconciler: Reconciler, name: str) -> set[str]:
    return {v.replica_id for v in reconciler.views.get(("default", name), {}).values()
            if v.state == RUNNING}


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def test_scale_up_and_down(world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    await table.deploy(spec("A", 3))
    await settle(reconciler, world.clock)
    assert len(running_ids(reconciler, "A")) == 3
    assert len(world.runtime.alive()) == 3
    await table.deploy(spec("A", 1))
    await settle(reconciler, world.clock)
    assert len(running_ids(reconciler, "A")) == 1
    assert len(world.runtime.alive()) == 1
    assert len(await world.store.list_prefix(world.keys.replicas)) == 1


async def test_one_broken_deployment_does_not_stop_the_others(world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    # An observation that makes reconciling "Bad" raise on every tick.
    reconciler.views[("default", "Bad")] = {"ghost": ReplicaView("ghost", 0, "v", "h")}
    await table.deploy(spec("Good", 2))
    await settle(reconciler, world.clock)
    assert len(running_ids(reconciler, "Good")) == 2


async def test_unhealthy_replica_replaced_after_three_failures(world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    await table.deploy(spec("A", 2))
    await settle(reconciler, world.clock)
    sick = next(iter(running_ids(reconciler, "A")))
    world.client.unhealthy.add(reconciler.records[sick].control_address)
    await settle(reconciler, world.clock, ticks=15)
    assert sick not in running_ids(reconciler, "A")
    assert len(running_ids(reconciler, "A")) == 2


async def test_failed_startups_end_in_deploy_failed(world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    world.runtime.broken["bad:C"] = "ValueError: no"
    await table.deploy(spec("A", 1, import_path="bad:C"))
    await settle(reconciler, world.clock, ticks=80)
    status = planned_status(reconciler, table.get("default", "A"))
    assert status is not None and status[0] == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED
    assert "ValueError: no" in status[1]
    started = len(world.runtime.replicas)
    assert started == 3  # min(3 x 1, 20) attempts, then no more
    await settle(reconciler, world.clock, ticks=20)
    assert len(world.runtime.replicas) == started


async def test_new_leader_adopts_drops_dead_records_and_stops_orphans(
        world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    await table.deploy(spec("A", 3))
    await settle(reconciler, world.clock)
    handles = {r.handle for r in world.runtime.alive()}
    # While no one leads: one replica dies, and a stray one appears.
    dead = next(iter(world.runtime.alive()))
    world.runtime.kill(dead.handle)
    stray = await world.runtime.start(ReplicaLaunch(
        cluster="unit", application="default", deployment="A", replica_id="stray",
        version="x", settings={"import_path": "m:C", "user_config_json": "",
                               "max_ongoing_requests": 5}))
    await reconciler.cancel_tasks()

    _, successor = await world.lead()
    await settle(successor, world.clock)
    assert not stray.alive, "the orphan was not stopped"
    alive = {r.handle for r in world.runtime.alive()}
    assert len(running_ids(successor, "A")) == 3
    assert handles - {dead.handle} <= alive, "adopted replicas were restarted"
    assert len(alive) == 3


class FlakyStore:
    """A real store whose next `failures` transactions raise StoreUnavailable."""

    def __init__(self, inner, failures: int = 0) -> None:
        self._inner, self.failures = inner, failures

    async def txn(self, guards, ops):
        if self.failures:
            self.failures -= 1
            raise StoreUnavailable("injected")
        return await self._inner.txn(guards, ops)

    def __getattr__(self, name):
        return getattr(self._inner, name)


async def test_start_whose_registry_write_fails_is_retried(world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    await table.deploy(spec("A", 1))
    flaky = FlakyStore(world.store, failures=1)
    reconciler._ops._fenced._store = flaky  # the next registry write fails
    await settle(reconciler, world.clock, ticks=20)
    assert len(running_ids(reconciler, "A")) == 1
    records = await world.store.list_prefix(world.keys.replicas)
    assert len(records) == 1 and len(world.runtime.alive()) == 1
    # Not the replica's fault: no startup failure was counted.
    assert reconciler._failures[("default", "A")].count == 0


async def test_stop_whose_write_fails_is_retried(world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    await table.deploy(spec("A", 2))
    await settle(reconciler, world.clock)
    await table.deploy(spec("A", 1))
    reconciler._ops._fenced._store = FlakyStore(world.store, failures=2)
    await settle(reconciler, world.clock, ticks=20)
    assert len(world.runtime.alive()) == 1
    assert len(await world.store.list_prefix(world.keys.replicas)) == 1


async def test_deleted_history_is_capped_but_keeps_deployments_still_stopping(
        world: FakeControlPlane) -> None:
    table, reconciler = await world.lead(max_history=2)
    for name in ("A", "B", "C", "D"):
        await table.deploy(spec(name, 1))
    await settle(reconciler, world.clock)
    # Past the cap, but their replicas are still running: all three stay.
    await table.delete("", ["A", "B", "C"])
    assert [r.spec.name for r in table.list(include_deleted=True) if r.deleted] == [
        "A", "B", "C"]
    await settle(reconciler, world.clock)  # their replicas stop
    world.clock.advance(1)
    await table.delete("", ["D"])
    assert [r.spec.name for r in table.list(include_deleted=True)] == ["C", "D"]
    stored = {kv.key.rsplit("/", 1)[1] for kv in
              await world.store.list_prefix(world.keys.deployments)}
    assert stored == {"C", "D"}, "the oldest deleted deployments are gone from the store too"
    await settle(reconciler, world.clock)
    assert not world.runtime.alive()


async def test_a_stop_that_keeps_failing_backs_off(world: FakeControlPlane) -> None:
    table, reconciler = await world.lead()
    await table.deploy(spec("A", 1))
    await settle(reconciler, world.clock)
    attempts = 0
    real_stop = world.runtime.stop

    async def broken_stop(handle: str, timeout_s: float) -> None:
        nonlocal attempts
        attempts += 1
        if attempts <= 6:
            raise RuntimeError("the runtime refuses to stop it")
        await real_stop(handle, timeout_s)

    world.runtime.stop = broken_stop  # this fake instance only
    await table.delete("", ["A"])
    # 100 ticks of 0.1 s: without backoff, a try on nearly every tick.
    await settle_fine(reconciler, world.clock, ticks=100, step_s=0.1)
    assert 3 <= attempts <= 6, f"{attempts} attempts in 10 s"
    await settle_fine(reconciler, world.clock, ticks=200, step_s=0.1)
    assert attempts == 7 and not world.runtime.alive(), "it is stopped in the end"


async def settle_fine(reconciler: Reconciler, clock: FakeClock, ticks: int,
                      step_s: float) -> None:
    for _ in range(ticks):
        clock.advance(step_s)
        await reconciler.tick()
        await asyncio.sleep(0)
        await reconciler.wait_tasks()
