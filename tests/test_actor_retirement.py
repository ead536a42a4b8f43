"""An old version's deployment-scoped actors outlive its replicas, not the new
version's arrival (controller/reconcile/actor_retirement.py): the pure rule,
and a leader term under a fake clock, runtime and build step."""

from __future__ import annotations

import asyncio
import json

import test_application_builds
from fakes import FakeControlPlane
from google.protobuf.timestamp_pb2 import Timestamp
from test_application_builds import ScriptedBuild, app, applied, deployments, request, until

from servefleet._private.actor_env import ACTOR_OF_ENV, ACTORS_ENV
from servefleet.controller.reconcile.actor_retirement import retired
from servefleet.controller.reconcile.builder import BuildResult
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import records_pb2, replica_pb2


def record(name: str, env: dict[str, str], version: str = "", started: int = 1,
           updated: int = 1) -> records_pb2.DeploymentRecord:
    return records_pb2.DeploymentRecord(
        spec=d.DeploymentSpec(name=name, application="shop",
                              runtime=d.RuntimeOptions(env=env)),
        version=version, code_hash=version, start_time=Timestamp(seconds=started),
        update_time=Timestamp(seconds=updated))


def replica(version: str) -> replica_pb2.ReplicaRecord:
    return replica_pb2.ReplicaRecord(version=version, code_hash=version)


def test_the_rule() -> None:
    old = record("Front-counter-1", {ACTOR_OF_ENV: "Front"}, started=1)
    new = record("Front-counter-2", {ACTOR_OF_ENV: "Front"}, started=5)
    front = record("Front", {ACTORS_ENV: json.dumps({"counter": "Front-counter-2"})}, "v2",
                   updated=5)
    assert not retired(new, front, [replica("v1")])  # named by the goal
    assert not retired(old, front, [replica("v2"), replica("v1")])  # v1 still runs
    assert retired(old, front, [replica("v2")])
    assert retired(old, front, [])
    # An actor made after the goal was written: the next goal's (a local run
    # deploys a version's actors just before the deployment).
    early = record("Front-counter-3", {ACTOR_OF_ENV: "Front"}, started=6)
    assert not retired(early, front, [replica("v2")])
    # The parent was deleted: its actors go with its last replica.
    gone = record("Front", {}, "v1")
    gone.deleted = True
    gone.end_time.FromSeconds(7)
    assert not retired(old, gone, [replica("v1")])
    assert retired(old, gone, [])
    # One made after that, or before its parent is there, waits for the parent.
    assert not retired(record("Front-counter-4", {ACTOR_OF_ENV: "Front"}, started=8), gone, [])
    assert not retired(old, None, [])


def graph(version: str) -> BuildResult:
    actor = f"Front-counter-{version}"
    return BuildResult({"ingress": "Front", "deployments": [
        {"name": "Front", "import_path": f"shop:Front{version}", "options": {
            "num_replicas": 2, "graceful_shutdown_wait_loop_s": 0.5,
            "runtime": {"env": {ACTORS_ENV: json.dumps({"counter": actor})}}}},
        {"name": actor, "import_path": "shop:Counter", "options": {
            "num_replicas": 1, "runtime": {"env": {ACTOR_OF_ENV: "Front"}}}}]})


# The build tests' fixtures: a scripted build step and a FakeControlPlane using it.
build = test_application_builds.build
world = test_application_builds.world


def old_front_replicas(term: LeaderTerm) -> int:
    observed = term.observed.deployments.get(("shop", "Front"))
    current = term.deployments.get("shop", "Front")
    return sum((r.record.version, r.record.code_hash) != (current.version, current.code_hash)
               for r in (observed.replicas if observed is not None else ()))


async def test_a_rollout_keeps_the_old_actor_until_the_old_replicas_are_gone(
        world: FakeControlPlane, build: ScriptedBuild) -> None:
    term = await world.lead()
    await term.applications.deploy(request(app()))
    await until(world, term, lambda: len(build.calls) == 1)
    build.release(graph("1"))
    await until(world, term, lambda: applied(term) == 1 and len(world.runtime.alive()) == 3)

    await term.applications.deploy(request(app(import_path="shop.v2:app")))
    await until(world, term, lambda: len(build.calls) == 2)
    build.release(graph("2"))
    await until(world, term, lambda: applied(term) == 2)
    # Applied: the new version's actor is there, and the old one stays.
    assert deployments(term) == ["Front", "Front-counter-1", "Front-counter-2"]
    assert old_front_replicas(term) == 2
    seen_old = False
    for _ in range(300):  # the rollout; never the old actor without the old replicas
        world.clock.advance(0.1)
        await term.loop.run_pass()
        await asyncio.sleep(0.005)
        old = old_front_replicas(term)
        seen_old = seen_old or old > 0
        if "Front-counter-1" not in deployments(term):
            assert old == 0
            break
        assert old > 0 or len(deployments(term)) == 3
    else:
        raise AssertionError("the old actor was never retired")
    assert seen_old and deployments(term) == ["Front", "Front-counter-2"]
