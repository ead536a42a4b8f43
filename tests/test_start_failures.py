"""A deployment whose replicas fail to start, from the goal to its callers,
in real leader terms under a fake clock, runtime and build step (unit tests):
what clears its failures, and what its replica set tells callers."""

from __future__ import annotations

import pytest
from fakes import FakeControlPlane
from test_application_builds import ScriptedBuild, app, graph, request, until
from test_reconciler import spec, status

from servefleet._private.wire import replicas_key
from servefleet.controller.reconcile.planner import goal_of
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import status_pb2

DS = status_pb2.DeploymentStatus


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def broken(world: FakeControlPlane, replicas: int) -> LeaderTerm:
    """A leader term with a deployment A whose replicas fail to start."""
    term = await world.lead()
    world.runtime.broken["bad:C"] = "ValueError: no weights"
    await term.deployments.deploy(spec("A", replicas, import_path="bad:C"))
    return term


async def failed(world: FakeControlPlane, replicas: int = 1) -> LeaderTerm:
    """A leader term whose deployment A's replicas failed to start until it gave up."""
    term = await broken(world, replicas)
    await world.settle(term, ticks=80)
    assert status(term, "A")[0] == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED
    assert len(world.runtime.replicas) == 3 * replicas
    return term


def deploy_failed(term: LeaderTerm, application: str, name: str) -> bool:
    record = next((r for r in term.deployments.list(application=application)
                   if r.spec.name == name), None)
    if record is None:
        return False
    planned = term.observed.planned_status(record, goal_of(record))
    return planned is not None and planned[0] == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED


def unavailable(term: LeaderTerm, name: str = "A") -> str:
    """What callers of the deployment are told instead of waiting (ReplicaSet.unavailable)."""
    snapshot = term.publisher.snapshot(replicas_key("default", name))
    assert snapshot is not None
    return snapshot.replicas.unavailable


async def test_a_deployment_deleted_and_deployed_again_starts_afresh(
        world: FakeControlPlane) -> None:
    """Its failures went with it, even when the deploy comes before the
    reconciler saw the deletion (its failed replicas still stopping)."""
    term = await failed(world)
    await term.deployments.delete("default", ["A"])
    world.clock.advance(0.5)
    await term.deployments.deploy(spec("A", 1, import_path="bad:C"))
    await world.settle(term, ticks=2)
    assert len(world.runtime.replicas) == 4  # started again
    assert status(term, "A")[0] == DS.DEPLOYMENT_STATUS_UPDATING
    await world.settle(term, ticks=80)  # and given up again, after as many tries
    assert status(term, "A")[0] == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED
    assert len(world.runtime.replicas) == 6


async def test_deploying_a_failed_deployment_again_unchanged_starts_it_again(
        world: FakeControlPlane) -> None:
    term = await failed(world)
    version, updating = await term.deployments.deploy(spec("A", 1, import_path="bad:C"))
    assert updating
    await world.settle(term, ticks=2)
    assert len(world.runtime.replicas) == 4
    code, message = status(term, "A")
    assert code == DS.DEPLOYMENT_STATUS_UPDATING and "ValueError: no weights" in message
    del world.runtime.broken["bad:C"]  # what was missing is there now
    await world.settle(term, ticks=20)
    assert status(term, "A") == (DS.DEPLOYMENT_STATUS_HEALTHY, "")
    # Unchanged and healthy: nothing to do.
    assert await term.deployments.deploy(spec("A", 1, import_path="bad:C")) == (version, False)


async def test_a_deployment_still_retrying_is_not_hurried_by_a_deploy(
        world: FakeControlPlane) -> None:
    term = await broken(world, 3)
    await world.settle(term, ticks=2)
    assert 0 < len(world.runtime.replicas) < 9
    assert not (await term.deployments.deploy(spec("A", 3, import_path="bad:C")))[1]


async def test_an_application_that_failed_to_start_is_deployed_again_unchanged() -> None:
    build = ScriptedBuild()
    world = FakeControlPlane(build=build)
    try:
        term = await world.lead()
        world.runtime.broken["shop:Model"] = "ValueError: no weights"
        await term.applications.deploy(request(app()))
        await until(world, term, lambda: len(build.calls) == 1)
        build.release(graph("Model"))
        await until(world, term, lambda: deploy_failed(term, "shop", "Model"), passes=1000)
        started = len(world.runtime.replicas)

        changed, _ = await term.applications.deploy(request(app()))
        assert changed == ["shop"]  # built and applied again
        await until(world, term, lambda: len(build.calls) == 2)
        build.release(graph("Model"))
        await until(world, term, lambda: len(world.runtime.replicas) > started)
        # A dry run of an application that failed says it would deploy it, and does not.
        await until(world, term, lambda: deploy_failed(term, "shop", "Model"), passes=1000)
        changed, _ = await term.applications.deploy(request(app(), dry_run=True))
        assert changed == ["shop"] and deploy_failed(term, "shop", "Model")
    finally:
        await world.close()


async def test_callers_are_told_at_the_first_failed_start_not_after_the_last(
        world: FakeControlPlane) -> None:
    term = await broken(world, 3)
    await world.settle(term, ticks=0)
    assert unavailable(term) == ""  # starting: callers wait for a replica
    await world.settle(term, ticks=2)
    assert status(term, "A")[0] == DS.DEPLOYMENT_STATUS_UPDATING  # still retrying
    told = unavailable(term)
    assert "deployment A is unavailable" in told and "ValueError: no weights" in told
    assert "keeps retrying" in told

    del world.runtime.broken["bad:C"]
    await world.settle(term, ticks=30)
    assert status(term, "A") == (DS.DEPLOYMENT_STATUS_HEALTHY, "")
    assert unavailable(term) == ""


async def test_failed_starts_of_a_new_version_leave_the_old_one_serving(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec("A", 2, import_path="good:C"))
    await world.settle(term)
    world.runtime.broken["bad:C"] = "ValueError: no weights"
    await term.deployments.deploy(spec("A", 2, import_path="bad:C"))
    await world.settle(term, ticks=80)
    assert status(term, "A")[0] == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED
    assert unavailable(term) == ""
    assert len(term.publisher.snapshot(replicas_key("default", "A")).replicas.endpoints) == 2
