"""Which deployments a reconcile pass visits (controller/reconcile/visits.py):
the schedule alone, then the replica reconciler in a real leader term under a
fake clock, runtime and replica client (unit tests)."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from fakes import FakeControlPlane

from servefleet.controller.reconcile.planner import RUNNING
from servefleet.controller.reconcile.visits import FULL_PASS_S, Visits
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import deployment_pb2 as d


def test_schedule_visits_marked_restless_and_due_keys() -> None:
    visits: Visits[str] = Visits(full_pass_s=5)
    assert visits.due(0.0, lambda: ["a", "b", "c"]) == ["a", "b", "c"]  # the first is full
    visits.visited("a", math.inf)
    visits.visited("b", 2.0)
    visits.visited("c", None)  # unsettled
    assert visits.due(0.1, lambda: ["a", "b", "c"]) == ["c"]
    visits.mark("a")
    assert visits.due(0.2, lambda: []) == ["a", "c"]
    assert visits.due(0.3, lambda: []) == ["c"]  # a mark is taken once
    visits.visited("c", math.inf)
    assert visits.due(1.9, lambda: []) == []
    assert visits.due(2.0, lambda: []) == ["b"]  # its timer
    assert visits.due(2.1, lambda: []) == []
    assert visits.full_due(5.0)
    assert visits.due(5.0, lambda: ["a", "b", "c", "d"]) == ["a", "b", "c", "d"]


def test_schedule_keeps_only_the_latest_timer_and_forgets() -> None:
    visits: Visits[str] = Visits(full_pass_s=100)
    visits.due(0.0, lambda: [])
    visits.visited("a", 1.0)
    visits.visited("a", 3.0)  # moved: the entry for 1.0 is stale
    assert visits.due(1.5, lambda: []) == []
    assert visits.due(3.0, lambda: []) == ["a"]
    visits.visited("b", None)
    visits.visited("c", 4.0)
    visits.forget("b")
    visits.forget("c")
    assert visits.due(5.0, lambda: []) == []


def spec(name: str, replicas: int) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="m:C", replica_config=d.ReplicaConfig(
        num_replicas=replicas, health_check_period_s=10))


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def settled_term(world: FakeControlPlane, count: int) -> tuple[LeaderTerm, Counter]:
    """`count` deployments of 2 replicas, all RUNNING; the Counter counts visits."""
    term = await world.lead()
    for i in range(count):
        await term.deployments.deploy(spec(f"d{i}", 2))
    await world.settle(term, ticks=10, step_s=0.1)
    assert all(r.view.state == RUNNING for o in term.observed.deployments.values()
               for r in o.replicas)
    replicas = term.replicas
    assert replicas is not None
    visited: Counter = Counter()
    reconcile = replicas.reconcile

    def counting(key: tuple[str, str], now: float) -> None:
        visited[key[1]] += 1
        reconcile(key, now)

    replicas.reconcile = counting  # type: ignore[method-assign]
    return term, visited


async def passes(world: FakeControlPlane, term: LeaderTerm, count: int,
                 step_s: float = 0.1) -> None:
    await world.settle(term, ticks=count - 1, step_s=step_s)


async def test_settled_deployments_are_left_alone_until_something_happens(world) -> None:
    term, visited = await settled_term(world, 20)
    term.replicas._visits._next_full = math.inf  # no safety net: only what is marked
    await passes(world, term, 5)
    # Health checks fall due (10 s period, from a random point): few, if any, in 0.5 s.
    assert sum(visited.values()) <= 4, visited

    visited.clear()
    await term.deployments.deploy(spec("d3", 3))
    await passes(world, term, 10)
    assert visited["d3"] >= 2 and set(visited) <= {"d3"} | set(visited) - {"d3"}
    assert len(term.observed.serving("default", "d3")) == 3
    others = sum(n for name, n in visited.items() if name != "d3")
    assert others <= 8, visited  # health checks only

    visited.clear()
    victim = term.observed.serving("default", "d7")[0].record
    world.runtime.kill(victim.handle)
    await passes(world, term, 10)  # the sweep finds it gone, and it is replaced
    assert visited["d7"] >= 2
    assert victim.replica_id not in {r.record.replica_id
                                     for r in term.observed.serving("default", "d7")}
    assert len(term.observed.serving("default", "d7")) == 2


async def test_health_checks_still_come_when_due(world) -> None:
    term, visited = await settled_term(world, 5)
    term.replicas._visits._next_full = math.inf
    world.client.checks.clear()
    await passes(world, term, 30, step_s=1.0)  # 30 s: three 10 s periods
    checked = Counter(address for address, _ in world.client.checks)
    assert len(checked) == 10 and all(2 <= n <= 4 for n in checked.values()), checked
    # Each visit was for a check: about one per replica per period.
    assert sum(visited.values()) <= 10 * 4 + 5, visited


async def test_an_unhealthy_replica_is_replaced_between_full_passes(world) -> None:
    term, _ = await settled_term(world, 3)
    term.replicas._visits._next_full = math.inf
    sick = term.observed.serving("default", "d1")[0].record
    world.client.unhealthy.add(sick.control_address)
    await passes(world, term, 60, step_s=1.0)
    serving = {r.record.replica_id for r in term.observed.serving("default", "d1")}
    assert sick.replica_id not in serving and len(serving) == 2


async def test_a_full_pass_visits_every_deployment(world) -> None:
    term, visited = await settled_term(world, 10)
    await passes(world, term, int(FULL_PASS_S / 0.5) + 2, step_s=0.5)
    assert set(visited) == {f"d{i}" for i in range(10)}
