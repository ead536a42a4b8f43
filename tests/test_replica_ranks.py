"""A replica's rank and world size: known to its constructor, changed by
Reconfigure, told to `reconfigure(user_config, rank)` as Ray Serve tells it."""

from __future__ import annotations

from pathlib import Path

import pytest

from servefleet._private import replica_context
from servefleet.replica.replica import PHASE, Replica, ReplicaSettings
from servefleet.serve import get_replica_context
from servefleet.serve.context import _get_internal_replica_context
from servefleet.serve.schema import ReplicaRank

APPS = str(Path(__file__).parent / "apps")


def replica_for(attr: str, user_config: str = "", rank: int = 1) -> Replica:
    return Replica(ReplicaSettings(
        cluster="t", application="a", deployment="d", replica_id="r1", version="v1",
        host="127.0.0.1", control_port=1, http_port=1, import_path=f"rank_app:{attr}",
        working_dir=APPS, user_config_json=user_config, rank=rank, world_size=3))


@pytest.fixture(autouse=True)
def _forget_identity():
    yield
    replica_context.clear()


async def test_the_constructor_and_reconfigure_see_the_rank() -> None:
    replica = replica_for("RankAware", '{"m": 1}')
    await replica.load()
    assert replica.phase == PHASE.REPLICA_PHASE_READY, replica.error
    instance = replica.deployment.instance
    assert instance.seen_in_init == (1, 3)
    assert instance.calls == [({"m": 1}, 1)]  # at start, after __init__

    # A new rank (the controller's Reconfigure): reconfigure is called with it.
    assert await replica.apply_config('{"m": 1}', 0, rank=0, world_size=2)
    assert instance.calls[-1] == ({"m": 1}, 0)
    assert instance() == {"rank": 0, "world_size": 2}
    # The same again, or a world size alone: not called.
    assert not await replica.apply_config('{"m": 1}', 0, rank=0, world_size=2)
    assert not await replica.apply_config('{"m": 1}', 0, rank=None, world_size=4)
    assert len(instance.calls) == 2 and get_replica_context().world_size == 4
    # A new user_config: called with the rank in force.
    assert await replica.apply_config('{"m": 2}', 0)
    assert instance.calls[-1] == ({"m": 2}, 0)
    context = _get_internal_replica_context()
    assert context is not None and context.rank == ReplicaRank(0, node_rank=0, local_rank=0)
    replica.executor.shutdown()


async def test_without_a_user_config_a_new_rank_calls_nothing() -> None:
    replica = replica_for("RankAware")
    await replica.load()
    assert not await replica.apply_config("", 0, rank=2, world_size=3)
    assert replica.deployment.instance.calls == []
    assert get_replica_context().rank.rank == 2
    replica.executor.shutdown()


async def test_a_reconfigure_without_a_rank_parameter_is_not_called_for_ranks() -> None:
    replica = replica_for("ConfigOnly", '{"k": 1}')
    await replica.load()
    assert replica.deployment.instance.calls == [{"k": 1}]
    assert not await replica.apply_config('{"k": 1}', 0, rank=0, world_size=3)
    assert replica.deployment.instance.calls == [{"k": 1}]
    replica.executor.shutdown()


def test_outside_a_replica_there_is_no_context() -> None:
    assert _get_internal_replica_context() is None
