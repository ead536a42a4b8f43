"""Replica ranks (Ray Serve's): dense 0..n-1 in a deployment, the lowest free
one for a new replica, kept for a replica's life, moved down once the
deployment is settled, kept across a failover (controller/reconcile/ranks.py)."""

from __future__ import annotations

import pytest
from fakes import FakeControlPlane

from servefleet.controller.reconcile.planner import (
    Goal,
    ReplicaView,
    StartupFailures,
    plan_deployment,
)
from servefleet.controller.reconcile.ranks import NO_RANK, compacted, lowest_free
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, status_pb2

RUNNING = replica_pb2.REPLICA_STATE_RUNNING
HEALTHY = status_pb2.DEPLOYMENT_STATUS_HEALTHY


def test_a_new_replica_takes_the_lowest_free_rank() -> None:
    assert lowest_free([]) == 0
    assert lowest_free([0, 1, 3]) == 2
    assert lowest_free([NO_RANK, 1]) == 0


def test_only_ranks_at_or_past_the_target_move_down() -> None:
    assert compacted({"a": 0, "b": 1}, 2) == {}
    assert compacted({"a": 0, "b": 2}, 2) == {"b": 1}
    assert compacted({"a": 3, "b": 1, "c": 4}, 3) == {"a": 0, "c": 2}
    # Replicas without a rank (started before ranks) take the free ones.
    assert compacted({"a": NO_RANK, "b": 0}, 2) == {"a": 1}
    # A rank held twice: the lowest id keeps it.
    assert compacted({"b": 0, "a": 0}, 2) == {"b": 1}


def view(rid: str, rank: int, placed: tuple[int, int] | None) -> ReplicaView:
    return ReplicaView(rid, rank, "v1", "h1", state=RUNNING, config_hash="c",
                       rank=rank, placed=placed)


def test_the_planner_moves_ranks_only_once_the_deployment_is_healthy() -> None:
    goal = Goal(version="v1", code_hash="h1", target=2, config_hash="c")
    plan, _ = plan_deployment(goal, [view("a", 0, (0, 2)), view("b", 2, (2, 2))],
                              StartupFailures(), 0.0)
    assert plan.status == HEALTHY
    assert plan.rerank == {"b": 1} and plan.reconfigure == ["b"]
    # Settled with dense ranks: nothing to do.
    plan, _ = plan_deployment(goal, [view("a", 0, (0, 2)), view("b", 1, (1, 2))],
                              StartupFailures(), 0.0)
    assert (plan.rerank, plan.reconfigure) == ({}, [])
    # Told another world size (the target changed): told again.
    plan, _ = plan_deployment(goal, [view("a", 0, (0, 3)), view("b", 1, (1, 2))],
                              StartupFailures(), 0.0)
    assert plan.reconfigure == ["a"]
    # A replica that reports no placement (started before ranks) is not chased.
    plan, _ = plan_deployment(goal, [view("a", 0, None), view("b", 1, (1, 2))],
                              StartupFailures(), 0.0)
    assert plan.reconfigure == []
    # Not settled (one short of the target): ranks stay as they are.
    plan, _ = plan_deployment(goal, [view("b", 2, (2, 2))], StartupFailures(), 0.0)
    assert plan.rerank == {}


def spec(replicas: int, version: str) -> d.DeploymentSpec:
    return d.DeploymentSpec(name="A", import_path="m:C", version=version,
                            replica_config=d.ReplicaConfig(num_replicas=replicas,
                                                           health_check_period_s=1))


def ranks(world: FakeControlPlane, term: LeaderTerm) -> dict[str, tuple[int, int, int]]:
    """replica id -> (its record's rank, the rank and world size it was told)."""
    out = {}
    for info in term.observed.replica_infos():
        record = info.record
        if record.stopping or not record.control_address:
            continue
        launch = world.runtime.launches[record.control_address]
        out[record.replica_id] = (record.rank, launch.rank, launch.world_size)
    return out


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def test_ranks_are_dense_through_scaling_a_rollout_and_a_failover(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec(2, "v1"))
    await world.settle(term)
    assert sorted(ranks(world, term).values()) == [(0, 0, 2), (1, 1, 2)]
    first = ranks(world, term)

    # Scaling up: the new replica takes rank 2; the others keep theirs and
    # hear the new world size.
    await term.deployments.deploy(spec(3, "v1"))
    await world.settle(term)
    now = ranks(world, term)
    assert {i: now[i][0] for i in first} == {i: r[0] for i, r in first.items()}
    assert sorted(now.values()) == [(0, 0, 3), (1, 1, 3), (2, 2, 3)]

    # A rollout: new replicas start beside the old ones (ranks 3.., or those
    # the stopped ones freed); once settled, ranks are 0..n-1 again.
    await term.deployments.deploy(spec(3, "v2"))
    await world.settle(term, ticks=60)
    rolled = ranks(world, term)
    assert not set(rolled) & set(now)
    assert sorted(rolled.values()) == [(0, 0, 3), (1, 1, 3), (2, 2, 3)]

    # A new leader goes on with the ranks in the records: nothing moves,
    # nothing is told again.
    told = len(world.client.reconfigured)
    term = await world.lead()
    await world.settle(term)
    assert ranks(world, term) == rolled
    assert len(world.client.reconfigured) == told
