"""The replica reconciler in real leader terms, under a fake clock, runtime and
replica client (unit tests)."""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeControlPlane

from servefleet.controller.reconcile.planner import RUNNING, goal_of
from servefleet.controller.runtime import ReplicaLaunch
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import status_pb2

DS = status_pb2.DeploymentStatus


def spec(name: str, replicas: int, **fields) -> d.DeploymentSpec:
    config = {"health_check_period_s": 1, **fields.pop("config", {})}
    return d.DeploymentSpec(name=name, import_path=fields.pop("import_path", "m:C"),
                            replica_config=d.ReplicaConfig(num_replicas=replicas, **config),
                            **fields)


def running_ids(term: LeaderTerm, name: str) -> set[str]:
    observed = term.observed.deployments.get(("default", name))
    return {r.view.replica_id for r in observed.replicas
            if r.view.state == RUNNING} if observed else set()


def status(term: LeaderTerm, name: str) -> tuple[int, str]:
    record = term.deployments.get("default", name)
    planned = term.observed.planned_status(record, goal_of(record))
    assert planned is not None
    return planned


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def test_scale_up_and_down(world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec("A", 3))
    await world.settle(term)
    assert len(running_ids(term, "A")) == 3
    assert len(world.runtime.alive()) == 3
    assert status(term, "A") == (DS.DEPLOYMENT_STATUS_HEALTHY, "")
    await term.deployments.deploy(spec("A", 1))
    await world.settle(term)
    assert len(running_ids(term, "A")) == 1
    assert len(world.runtime.alive()) == 1
    assert len(await world.store.list_prefix(world.keys.replicas)) == 1


async def test_unhealthy_replica_replaced_after_three_failures(world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec("A", 2))
    await world.settle(term)
    sick = next(iter(running_ids(term, "A")))
    (record,) = [i.record for i in term.observed.replica_infos() if i.record.replica_id == sick]
    world.client.unhealthy.add(record.control_address)
    await world.settle(term, ticks=15)
    assert sick not in running_ids(term, "A")
    assert len(running_ids(term, "A")) == 2


async def test_failed_startups_end_in_deploy_failed(world: FakeControlPlane) -> None:
    term = await world.lead()
    world.runtime.broken["bad:C"] = "ValueError: no"
    await term.deployments.deploy(spec("A", 1, import_path="bad:C"))
    await world.settle(term, ticks=80)
    code, message = status(term, "A")
    assert code == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED and "ValueError: no" in message
    started = len(world.runtime.replicas)
    assert started == 3  # min(3 x 1, 20) attempts, then no more
    await world.settle(term, ticks=20)
    assert len(world.runtime.replicas) == started


async def test_a_constructor_that_never_finishes_is_a_failed_start(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    world.runtime.loading.add("slow:C")  # its replicas answer "loading" forever
    await term.deployments.deploy(spec("A", 1, import_path="slow:C",
                                       config={"startup_timeout_s": 5}))
    await world.settle(term, ticks=5)  # 3 s: still starting
    assert status(term, "A")[0] == DS.DEPLOYMENT_STATUS_UPDATING
    assert len(world.runtime.alive()) == 1
    await world.settle(term, ticks=100)
    code, message = status(term, "A")
    assert code == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED
    assert "did not become ready within startup_timeout_s (5 s)" in message
    assert len(world.runtime.replicas) == 3 and not world.runtime.alive()


async def test_new_leader_adopts_drops_dead_records_and_stops_orphans(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec("A", 3))
    await world.settle(term)
    handles = {r.handle for r in world.runtime.alive()}
    await term.stop()
    # While no one leads: one replica dies, and a stray one appears.
    dead = next(iter(world.runtime.alive()))
    world.runtime.kill(dead.handle)
    stray = await world.runtime.start(ReplicaLaunch(
        cluster="unit", application="default", deployment="A", replica_id="stray",
        version="x", settings={"import_path": "m:C", "user_config_json": "",
                               "max_ongoing_requests": 5}))

    successor = await world.lead()
    await world.settle(successor)
    assert not stray.alive, "the orphan was not stopped"
    alive = {r.handle for r in world.runtime.alive()}
    assert len(running_ids(successor, "A")) == 3
    assert handles - {dead.handle} <= alive, "adopted replicas were restarted"
    assert len(alive) == 3


async def test_start_whose_registry_write_fails_is_retried(world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec("A", 1))
    world.store.failures = 1  # the next registry write fails
    await world.settle(term, ticks=20)
    assert len(running_ids(term, "A")) == 1
    records = await world.store.list_prefix(world.keys.replicas)
    assert len(records) == 1 and len(world.runtime.alive()) == 1
    # Not the replica's fault: no startup failure was counted.
    assert status(term, "A") == (DS.DEPLOYMENT_STATUS_HEALTHY, "")


async def test_stop_whose_write_fails_is_retried(world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec("A", 2))
    await world.settle(term)
    await term.deployments.deploy(spec("A", 1))
    world.store.failures = 2
    await world.settle(term, ticks=20)
    assert len(world.runtime.alive()) == 1
    assert len(await world.store.list_prefix(world.keys.replicas)) == 1


async def test_deleted_history_is_capped_but_keeps_deployments_still_stopping(
        world: FakeControlPlane) -> None:
    term = await world.lead(max_history=2)
    table = term.deployments
    for name in ("A", "B", "C", "D"):
        await table.deploy(spec(name, 1))
    await world.settle(term)
    # Past the cap, but their replicas are still running: all three stay.
    await table.delete("", ["A", "B", "C"])
    assert [r.spec.name for r in table.list(include_deleted=True) if r.deleted] == [
        "A", "B", "C"]
    await world.settle(term)  # their replicas stop
    world.clock.advance(1)
    await table.delete("", ["D"])
    assert [r.spec.name for r in table.list(include_deleted=True)] == ["C", "D"]
    stored = {kv.key.rsplit("/", 1)[1] for kv in
              await world.store.list_prefix(world.keys.deployments)}
    assert stored == {"C", "D"}, "the oldest deleted deployments are gone from the store too"
    await world.settle(term)
    assert not world.runtime.alive()


async def test_a_stop_that_keeps_failing_backs_off(world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec("A", 1))
    await world.settle(term)
    attempts = 0
    real_stop = world.runtime.stop

    async def broken_stop(handle: str, timeout_s: float) -> None:
        nonlocal attempts
        attempts += 1
        if attempts <= 6:
            raise RuntimeError("the runtime refuses to stop it")
        await real_stop(handle, timeout_s)

    world.runtime.stop = broken_stop  # this fake instance only
    await term.deployments.delete("", ["A"])
    # 100 passes of 0.1 s: without backoff, a try on nearly every pass.
    await world.settle(term, ticks=100, step_s=0.1)
    assert 3 <= attempts <= 6, f"{attempts} attempts in 10 s"
    await world.settle(term, ticks=200, step_s=0.1)
    assert attempts == 7 and not world.runtime.alive(), "it is stopped in the end"


async def _suspected(world: FakeControlPlane, replicas: int) -> tuple[LeaderTerm, str, str]:
    """A deployment of `replicas` whose routine checks are far apart (60 s)
    and time out after 4 s; one of its replicas hangs and a proxy reports it
    (load reports' `suspected`). Returns (term, its id, its control address)."""
    term = await world.lead()
    await term.deployments.deploy(spec("A", replicas, config={
        "health_check_period_s": 60, "health_check_timeout_s": 4}))
    await world.settle(term)
    sick = sorted(running_ids(term, "A"))[0]
    (record,) = [i.record for i in term.observed.replica_infos() if i.record.replica_id == sick]
    world.client.hung.add(record.control_address)
    world.client.checks.clear()
    term.load_reports.record("proxy-1", {}, {}, {}, [sick])
    return term, sick, record.control_address


async def test_a_replica_proxies_ejected_is_checked_at_once_and_replaced(
        world: FakeControlPlane) -> None:
    """Passive health's report: the suspect is checked at once, with the
    deployment's own health_check_timeout_s (a replica whose handler holds
    its loop or its interpreter lock for seconds answers late, not never),
    and, since another replica serves, one failure replaces it."""
    term, sick, address = await _suspected(world, 2)
    await world.settle(term, ticks=3, step_s=0.1)
    assert world.client.checks[:1] == [(address, 4.0)]
    await world.settle(term, ticks=5)
    assert sick not in running_ids(term, "A") and len(running_ids(term, "A")) == 2


async def test_the_last_replica_is_not_replaced_on_one_failed_check(
        world: FakeControlPlane) -> None:
    """A suspect that is its deployment's only serving replica is replaced
    only after HEALTH_FAILURE_THRESHOLD failed checks in a row (checked again
    every SUSPECT_RECHECK_S while reported): replacing it on one would leave
    nothing serving while its successor loads."""
    from servefleet.controller.reconcile.replicas import SUSPECT_RECHECK_S
    from servefleet.controller.reconcile.transitions import HEALTH_FAILURE_THRESHOLD

    term, sick, address = await _suspected(world, 1)
    await world.settle(term, ticks=3, step_s=0.1)
    assert len(world.client.checks) == 1
    for failed in range(1, HEALTH_FAILURE_THRESHOLD):
        assert running_ids(term, "A") == {sick}, f"replaced after {failed} failed checks"
        world.clock.advance(SUSPECT_RECHECK_S)
        term.load_reports.record("proxy-1", {}, {}, {}, [sick])  # it still answers nothing
        await world.settle(term, ticks=1, step_s=0.1)
    await world.settle(term, ticks=3, step_s=0.5)
    assert [a for a, _ in world.client.checks] == [address] * HEALTH_FAILURE_THRESHOLD
    assert sick not in running_ids(term, "A") and len(running_ids(term, "A")) == 1


async def test_a_new_term_holds_back_stops_of_replicas_it_inherited(
        world: FakeControlPlane) -> None:
    """Clients that lost their stream with the last term may not have heard
    of new replicas yet: a rollout right after a failover starts the new
    ones at once and stops the old only TAKEOVER_SETTLE_S after the term
    began. A deleted deployment's replicas are not held."""
    term = await world.lead()
    await term.deployments.deploy(spec("A", 2))
    await term.deployments.deploy(spec("B", 1))
    await world.settle(term)
    before = {r.handle for r in world.runtime.alive()}
    successor = await world.lead()
    await successor.deployments.deploy(spec("A", 2, import_path="m:D"))
    await successor.deployments.delete("default", ["B"])
    await world.settle(successor, ticks=12, step_s=0.5)  # 6 s into the term
    alive = {r.handle for r in world.runtime.alive()}
    assert len(running_ids(successor, "A")) == 4, "the new version did not start at once"
    assert len(alive - before) == 2 and len(before & alive) == 2, "B was held or A stopped"
    await world.settle(successor, ticks=10, step_s=0.5)  # 11 s
    assert len(world.runtime.alive()) == 2 and not before & {
        r.handle for r in world.runtime.alive()}


async def test_a_stop_that_outlives_its_term_does_nothing_more(world: FakeControlPlane,
                                                               caplog) -> None:
    """A leader paused in the middle of a stop, whose term ended meanwhile,
    neither claims the stop nor cleans up after it when it resumes: that is
    its successor's to do."""
    term = await world.lead()
    await term.deployments.deploy(spec("A", 1))
    await world.settle(term)
    entered, release = asyncio.Event(), asyncio.Event()
    stop, cleaned = world.runtime.stop, list[str]()

    async def paused_stop(handle: str, timeout_s: float) -> None:
        entered.set()
        await release.wait()
        await stop(handle, timeout_s)

    world.runtime.stop = paused_stop  # type: ignore[method-assign]
    world.runtime.cleanup = cleaned.append  # type: ignore[method-assign,assignment]
    await term.deployments.delete("default", ["A"])
    while not entered.is_set():
        world.clock.advance(0.6)
        await term.loop.run_pass()
        await asyncio.sleep(0.01)
    assert world.election is not None
    world.election.mark_lost("another controller leads")
    release.set()
    await term.loop.wait_idle()
    assert cleaned == [] and "stopped replica" not in caplog.text
    assert len(await world.store.list_prefix(world.keys.replicas)) == 1, "the record is kept"
