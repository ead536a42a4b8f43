"""ApplicationTable's goals and the build reconciler, in real leader terms
under a fake clock, runtime and build step (unit tests).

The build step is scripted: each call waits until the test releases it with
a result, so a test can act while a build is under way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from fakes import FakeControlPlane

from servefleet.controller.errors import NotLeader
from servefleet.controller.reconcile.builder import BuildResult
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api


class ScriptedBuild:
    """Stands in for the build process. Each call is recorded with its spec and
    waits for `release(result)`; `cancelled` counts builds cancelled while waiting."""

    def __init__(self) -> None:
        self.calls: list[apb.ApplicationSpec] = []
        self.cancelled = 0
        self._results: asyncio.Queue[BuildResult] = asyncio.Queue()

    def release(self, result: BuildResult) -> None:
        self._results.put_nowait(result)

    async def __call__(self, spec: apb.ApplicationSpec) -> BuildResult:
        self.calls.append(spec)
        try:
            return await self._results.get()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


def graph(*names: str, replicas: int = 1) -> BuildResult:
    return BuildResult({"ingress": names[0], "deployments": [
        {"name": n, "import_path": f"shop:{n}", "options": {"num_replicas": replicas}}
        for n in names]})


def request(*specs: apb.ApplicationSpec, **fields) -> api.DeployApplicationsRequest:
    return api.DeployApplicationsRequest(applications=list(specs), **fields)


def app(name: str = "shop", **fields) -> apb.ApplicationSpec:
    return apb.ApplicationSpec(name=name, import_path=fields.pop("import_path", "shop:app"),
                               **fields)


@pytest.fixture
async def build():
    return ScriptedBuild()


@pytest.fixture
async def world(build: ScriptedBuild):
    w = FakeControlPlane(build=build)
    yield w
    await w.close()


async def until(world: FakeControlPlane, term: LeaderTerm, done: Callable[[], bool],
                passes: int = 200) -> None:
    """Run passes (0.1 s of fake time each) until `done()`; the store works in
    a thread, so each pass also gives real time to the work it started."""
    for _ in range(passes):
        if done():
            return
        world.clock.advance(0.1)
        await term.loop.run_pass()
        await asyncio.sleep(0.005)
    raise AssertionError("the condition was not reached")


def deployments(term: LeaderTerm, application: str = "shop") -> list[str]:
    return sorted(r.spec.name for r in term.deployments.list() if r.spec.application == application)


def applied(term: LeaderTerm, name: str = "shop") -> int:
    record = term.applications.record(name)
    return record.applied_generation if record is not None else -1


async def stored(world: FakeControlPlane, name: str = "shop") -> apb.ApplicationRecord | None:
    value = await world.store.get(world.keys.application(name))
    return apb.ApplicationRecord.FromString(value.value) if value is not None else None


async def test_a_build_is_applied_and_an_unchanged_deploy_builds_nothing(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    changed, deleted = await term.applications.deploy(request(app()))
    assert (changed, deleted) == (["shop"], [])
    await until(world, term, lambda: len(build.calls) == 1)
    build.release(graph("Front", "Model"))
    await until(world, term, lambda: applied(term) == 1)
    assert deployments(term) == ["Front", "Model"]
    assert (await stored(world)).applied_generation == 1
    await until(world, term, lambda: len(world.runtime.alive()) == 2)

    changed, _ = await term.applications.deploy(request(app()))
    assert changed == []
    for _ in range(20):
        world.clock.advance(0.1)
        await term.loop.run_pass()
    assert len(build.calls) == 1 and term.applications.record("shop").generation == 1


async def test_dry_run_reports_the_changes_and_stores_nothing(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app("a")))
    changed, deleted = await term.applications.deploy(request(app("b"), dry_run=True))
    assert (changed, deleted) == (["b"], ["a"])
    assert term.applications.record("b") is None and await stored(world, "b") is None
    assert not term.applications.record("a").deleted


async def test_a_failed_build_is_recorded_and_not_retried_until_the_next_change(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app()))
    await until(world, term, lambda: len(build.calls) == 1)
    build.release(BuildResult(None, "ModuleNotFoundError: No module named 'shop'"))
    await until(world, term, lambda: term.applications.record("shop").failed_generation == 1)
    record = await stored(world)
    assert record.failed_generation == 1 and "No module named 'shop'" in record.build_error
    assert deployments(term) == []
    for _ in range(50):  # 5 s: well past any backoff
        world.clock.advance(0.1)
        await term.loop.run_pass()
    assert len(build.calls) == 1

    await term.applications.deploy(request(app(import_path="shop.main:app")))
    await until(world, term, lambda: len(build.calls) == 2)
    build.release(graph("Front"))
    await until(world, term, lambda: applied(term) == 2)
    assert (await stored(world)).build_error == ""


async def test_a_graph_that_cannot_be_applied_is_a_failed_build(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    overrides = [apb.DeploymentOverride(name="Missing")]
    await term.applications.deploy(request(app(deployments=overrides)))
    await until(world, term, lambda: len(build.calls) == 1)
    build.release(graph("Front"))
    await until(world, term, lambda: term.applications.record("shop").failed_generation == 1)
    assert "overrides deployment 'Missing'" in term.applications.record("shop").build_error
    assert deployments(term) == []


async def test_a_newer_deploy_cancels_the_build_under_way(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app()))
    await until(world, term, lambda: len(build.calls) == 1)
    await term.applications.deploy(request(app(import_path="shop.v2:app")))
    await until(world, term, lambda: len(build.calls) == 2)
    assert build.cancelled == 1
    assert build.calls[1].import_path == "shop.v2:app"
    build.release(graph("FrontV2"))
    await until(world, term, lambda: applied(term) == 2)
    assert deployments(term) == ["FrontV2"]


async def test_deleting_an_application_deletes_its_deployments_and_then_its_record(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app()))
    await until(world, term, lambda: len(build.calls) == 1)
    build.release(graph("Front", "Model"))
    await until(world, term, lambda: applied(term) == 1)
    assert await term.applications.delete(["shop"]) == ["shop"]
    await until(world, term, lambda: term.applications.record("shop") is None)
    assert await stored(world) is None
    assert all(r.deleted for r in term.deployments.list(include_deleted=True)
               if r.spec.application == "shop")
    await until(world, term, lambda: not world.runtime.alive())
    assert len(build.calls) == 1  # a deletion builds nothing


async def test_a_build_whose_write_fails_is_retried_with_backoff(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app()))
    await until(world, term, lambda: len(build.calls) == 1)
    world.store.failures = 1  # the store is down when the build's result is written
    build.release(graph("Front"))
    await until(world, term, lambda: len(build.calls) == 2)  # the build is done again
    build.release(graph("Front"))
    await until(world, term, lambda: applied(term) == 1)
    assert deployments(term) == ["Front"]


async def test_leadership_lost_mid_build_writes_nothing_and_the_next_leader_builds(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app()))
    await until(world, term, lambda: len(build.calls) == 1)
    # The lease is lost while the build runs: the old term's write is fenced.
    await world.election.resign()
    work = term.loop.task(("build", "shop"))
    assert work is not None
    build.release(graph("Front"))
    await work  # its write was refused (NotLeader ends the work quietly)
    with pytest.raises(NotLeader):
        await term.applications.apply_build("shop", 1, [])
    assert (await stored(world)).applied_generation == 0
    assert await world.store.list_prefix(world.keys.deployments) == []

    successor = await world.lead()  # stops the old term and its loop
    await until(world, successor, lambda: len(build.calls) == 2)
    build.release(graph("Front"))
    await until(world, successor, lambda: applied(successor) == 1)
    assert deployments(successor) == ["Front"]


async def test_leadership_lost_mid_build_cancels_the_build(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app()))
    await until(world, term, lambda: len(build.calls) == 1)
    await term.stop()
    assert build.cancelled == 1
