"""After a quiet spell, each thing that should make the reconcile loop visit a
settled deployment does so at once, not at the next full pass (issue 57:
controller/reconcile/visits.py).

A real leader term under a fake clock, runtime and replica client (unit
tests). Deployments settle, then nothing happens for QUIET_S of fake time
(only health checks, by their timers), with the safety net's full pass
switched off: whatever is not marked where it is observed would then never
be seen. Then one thing happens, and the published replica set (what every
watcher gets) must show it within a pass or two of 0.1 s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from fakes import FakeControlPlane

from servefleet._private.wire import replicas_key
from servefleet.controller.errors import Unavailable
from servefleet.controller.reconcile.inventory import LIVENESS_SWEEP_S
from servefleet.controller.reconcile.planner import RUNNING
from servefleet.controller.store import StoreUnavailable
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import deployment_pb2 as d

QUIET_S = 12.0
STEP_S = 0.1
# A change seen by the controller reaches the published set within this much
# fake time: a pass to take the observation in, one to act on what it asks.
WITHIN_S = 0.5


def spec(name: str, replicas: int, import_path: str = "m:C") -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path=import_path, replica_config=d.ReplicaConfig(
        num_replicas=replicas, health_check_period_s=10))


def autoscaled(name: str) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="m:C", replica_config=d.ReplicaConfig(
        health_check_period_s=10, autoscaling_config=d.AutoscalingConfig(
            min_replicas=1, max_replicas=4, target_ongoing_requests=2, upscale_delay_s=0,
            downscale_delay_s=600, look_back_period_s=1)))


def published(term: LeaderTerm, name: str) -> set[str]:
    snapshot = term.publisher.snapshot(replicas_key("default", name))
    assert snapshot is not None, f"no replica set published for {name}"
    return {e.replica_id for e in snapshot.replicas.endpoints}


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def quiet_term(world: FakeControlPlane, *specs: d.DeploymentSpec,
                     every_pass: Callable[[], None] = lambda: None) -> LeaderTerm:
    """`specs` deployed and RUNNING, then QUIET_S with nothing but health
    checks, the full pass off (only what is marked, timed or unsettled is
    visited)."""
    term = await world.lead()
    for s in specs:
        await term.deployments.deploy(s)
    await world.settle(term, ticks=10, step_s=STEP_S)
    assert all(r.view.state == RUNNING for o in term.observed.deployments.values()
               for r in o.replicas)
    assert term.replicas is not None
    term.replicas._visits._next_full = math.inf  # no safety net
    for _ in range(int(QUIET_S / STEP_S)):
        every_pass()
        await world.settle(term, ticks=1, step_s=STEP_S)
    assert term.replicas._visits.restless() == 0, "every deployment settled"
    return term


async def seconds_until(world: FakeControlPlane, term: LeaderTerm, done: Callable[[], bool],
                        every_pass: Callable[[], None] = lambda: None,
                        limit_s: float = 8.0) -> float:
    """Fake seconds of passes (STEP_S apart) until `done()`; inf past `limit_s`
    (beyond a full pass's FULL_PASS_S, were it on)."""
    began = world.clock.now
    while not done():
        if world.clock.now - began > limit_s:
            return math.inf
        every_pass()
        await world.settle(term, ticks=1, step_s=STEP_S)
    return world.clock.now - began


async def test_a_scale_up_after_a_quiet_spell_is_published_once_its_replica_is_ready(
        world: FakeControlPlane) -> None:
    term = await quiet_term(world, *(spec(f"d{i}", 2) for i in range(5)),
                            spec("slow", 2, import_path="slow:C"))
    # As a Deploy does: a new record in the store, through the table.
    await term.deployments.deploy(spec("d3", 3))
    assert await seconds_until(world, term, lambda: len(published(term, "d3")) == 3) \
        <= WITHIN_S
    # A replica that loads for a while: published once its probe says ready.
    world.runtime.loading.add("slow:C")
    await term.deployments.deploy(spec("slow", 3, import_path="slow:C"))
    await world.settle(term, ticks=10, step_s=STEP_S)  # a second of loading
    assert len(published(term, "slow")) == 2
    world.runtime.loading.discard("slow:C")
    assert await seconds_until(world, term, lambda: len(published(term, "slow")) == 3) \
        <= WITHIN_S


async def test_a_replica_that_exits_after_a_quiet_spell_is_unpublished_and_replaced(
        world: FakeControlPlane) -> None:
    term = await quiet_term(world, *(spec(f"d{i}", 2) for i in range(5)))
    victim = sorted(published(term, "d2"))[0]
    (record,) = [i.record for i in term.observed.replica_infos("default", "d2")
                 if i.record.replica_id == victim]
    world.runtime.kill(record.handle)
    # Found by the runtime listing, every LIVENESS_SWEEP_S.
    assert await seconds_until(world, term, lambda: victim not in published(term, "d2")) \
        <= LIVENESS_SWEEP_S + WITHIN_S
    assert await seconds_until(world, term, lambda: len(published(term, "d2")) == 2) \
        <= WITHIN_S


async def test_a_failing_replica_after_a_quiet_spell_is_unpublished_at_its_last_check(
        world: FakeControlPlane) -> None:
    """Routine checks (10 s apart, by their timers): the third failed one in a
    row replaces it, within a pass of that check."""
    term = await quiet_term(world, *(spec(f"d{i}", 2) for i in range(5)))
    sick = sorted(published(term, "d1"))[0]
    (record,) = [i.record for i in term.observed.replica_infos("default", "d1")
                 if i.record.replica_id == sick]
    world.client.unhealthy.add(record.control_address)
    world.client.checks.clear()

    def failed_checks() -> int:
        return sum(a == record.control_address for a, _ in world.client.checks)

    assert await seconds_until(world, term, lambda: failed_checks() == 3, limit_s=40) \
        < math.inf
    assert await seconds_until(world, term, lambda: sick not in published(term, "d1")) \
        <= WITHIN_S
    assert await seconds_until(world, term, lambda: len(published(term, "d1")) == 2) \
        <= WITHIN_S


async def test_a_replica_proxies_eject_after_a_quiet_spell_is_checked_and_replaced(
        world: FakeControlPlane) -> None:
    term = await quiet_term(world, *(spec(f"d{i}", 2) for i in range(5)))
    sick = sorted(published(term, "d4"))[0]
    (record,) = [i.record for i in term.observed.replica_infos("default", "d4")
                 if i.record.replica_id == sick]
    world.client.unhealthy.add(record.control_address)
    term.load_reports.record("proxy-1", {}, {}, {}, [sick])
    assert await seconds_until(world, term, lambda: sick not in published(term, "d4")) \
        <= WITHIN_S


async def test_an_autoscaling_decision_after_a_quiet_spell_is_published_at_once(
        world: FakeControlPlane) -> None:
    term: LeaderTerm | None = None

    def report(ongoing: int) -> Callable[[], None]:
        # A proxy reports every pass (a stale report would read as no load).
        def send() -> None:
            assert world.term is not None
            world.term.load_reports.record("proxy-1", {"default/auto": 0},
                                           {"default/auto": ongoing})
        return send

    term = await quiet_term(world, *(spec(f"d{i}", 2) for i in range(3)), autoscaled("auto"),
                            every_pass=report(0))
    assert len(published(term, "auto")) == 1
    # 8 requests in flight at a target of 2 each: 4 replicas.
    waited = await seconds_until(world, term, lambda: len(published(term, "auto")) == 4,
                                 every_pass=report(8))
    # The window (look_back_period_s 1 s) must see the load before it decides 4.
    assert waited <= 1.0 + WITHIN_S, waited


async def test_a_deploy_whose_answer_was_lost_is_acted_on_once_its_retry_reloads_the_table(
        world: FakeControlPlane) -> None:
    """The store took the write but its answer was lost (Unavailable: the
    table is stale). The client's retry reloads the table from the store,
    finds the spec there unchanged and writes nothing, so no write of its
    own tells the reconciler: the reload must (before: only the full pass,
    up to FULL_PASS_S later, saw it; here, with it off, never)."""
    term = await quiet_term(world, *(spec(f"d{i}", 2) for i in range(3)))
    answered = world.store.txn

    async def lands_then_fails(guards, ops):
        await answered(guards, ops)
        world.store.txn = answered  # this fake instance only, once
        raise StoreUnavailable("the answer was lost")

    world.store.txn = lands_then_fails
    with pytest.raises(Unavailable):
        await term.deployments.deploy(spec("d1", 3))
    await term.deployments.deploy(spec("d1", 3))  # the client's retry
    assert await seconds_until(world, term, lambda: len(published(term, "d1")) == 3) \
        <= WITHIN_S
