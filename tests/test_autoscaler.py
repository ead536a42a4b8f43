"""The autoscale reconciler in real leader terms, under a fake clock, runtime
and replica client, with load reports fed in by the test (unit tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import FakeControlPlane

from servefleet.controller.term import LeaderTerm
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import status_pb2

KEY = ("default", "A")
DS = status_pb2.DeploymentStatus
AS = status_pb2.ApplicationStatus


def spec(version: str = "v1", **autoscaling) -> d.DeploymentSpec:
    fields = {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 2,
              "upscale_delay_s": 0, "downscale_delay_s": 5, "look_back_period_s": 2,
              **autoscaling}
    return d.DeploymentSpec(name="A", import_path="m:C", version=version,
                            replica_config=d.ReplicaConfig(
                                health_check_period_s=1,
                                autoscaling_config=d.AutoscalingConfig(**fields)))


def running(term: LeaderTerm) -> int:
    observed = term.observed.deployments.get(KEY)
    return observed.counts().get("RUNNING", 0) if observed is not None else 0


def stored_target(term: LeaderTerm) -> int:
    record = term.deployments.get(*KEY)
    assert record is not None
    return record.autoscale.target_replicas


def report(term: LeaderTerm, ongoing: int = 0, queued: int = 0) -> None:
    term.load_reports.record("proxy-1", {"default/A": queued}, {"default/A": ongoing})


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def test_load_scales_up_then_down_and_each_change_is_stored(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec())
    await world.settle(term, ticks=5)
    assert running(term) == 1
    report(term, ongoing=8)  # 8 ongoing at 2 per replica: 4 replicas
    await world.settle(term, ticks=10)
    assert running(term) == 4 and stored_target(term) == 4
    # The window's mean catches up with the step in load, so the count may
    # climb in more than one change; the last one says why it reached 4.
    assert " to 4: load " in term.deployments.get(*KEY).autoscale.reason
    for _ in range(4):  # 2.4 s of no load: under downscale_delay_s
        report(term)
        await world.settle(term, ticks=1)
    assert stored_target(term) == 4
    for _ in range(10):
        report(term)  # a proxy keeps reporting, or its report would go stale
        await world.settle(term, ticks=1)
    assert stored_target(term) == 1 and running(term) == 1


async def test_a_new_leader_keeps_the_target_instead_of_initial_replicas(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec(initial_replicas=1))
    report(term, ongoing=8)
    await world.settle(term, ticks=10)
    assert running(term) == 4
    successor = await world.lead()  # the load reports are soft state: gone
    report(successor, ongoing=8)  # the proxies report to the new leader
    await world.settle(successor, ticks=10)
    assert stored_target(successor) == 4 and running(successor) == 4
    assert len(world.runtime.alive()) == 4, "replicas were stopped or started over"


async def test_an_update_keeps_the_count_within_the_new_bounds(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec())
    report(term, ongoing=8)
    await world.settle(term, ticks=10)
    assert stored_target(term) == 4
    await term.deployments.deploy(spec(version="v2"))  # a new version under load
    assert stored_target(term) == 4
    await term.deployments.deploy(spec(version="v3", max_replicas=3))
    assert stored_target(term) == 3


async def test_from_zero_and_back_to_zero(world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec(min_replicas=0, initial_replicas=0,
                                       downscale_to_zero_delay_s=3))
    await world.settle(term, ticks=5)
    assert running(term) == 0 and not world.runtime.alive()
    report(term, queued=1)  # a request waits at a proxy
    await world.settle(term, ticks=3)
    assert running(term) == 1
    report(term)
    await world.settle(term, ticks=5)  # 3 s: downscale_to_zero_delay_s
    assert running(term) == 1
    for _ in range(10):
        report(term)
        await world.settle(term, ticks=1)
    assert stored_target(term) == 0 and running(term) == 0


async def test_a_fixed_deployment_is_left_alone(world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(d.DeploymentSpec(
        name="A", import_path="m:C", replica_config=d.ReplicaConfig(num_replicas=2)))
    report(term, ongoing=50)
    await world.settle(term, ticks=10)
    assert running(term) == 2 and not term.deployments.get(*KEY).HasField("autoscale")


async def test_status_shows_the_autoscalers_view_and_scaling_is_no_trouble(
        world: FakeControlPlane) -> None:
    term = await world.lead()
    await term.deployments.deploy(spec())
    await world.settle(term, ticks=5)
    report(term, ongoing=8)
    for _ in range(20):  # until the decision is stored, before its replicas run
        await world.settle(term, ticks=1)
        if stored_target(term) == 4:
            break
    (app,) = term.status()
    (dep,) = app.deployments
    assert dep.status == DS.DEPLOYMENT_STATUS_UPSCALING, dep
    assert app.status == AS.APPLICATION_STATUS_RUNNING and app.message == ""
    assert dep.autoscaling.target_replicas == 4 and dep.autoscaling.current_replicas < 4
    assert dep.autoscaling.load > 0 and "to 4: load" in dep.autoscaling.reason
    await world.settle(term, ticks=10)
    (app,) = term.status()
    assert app.deployments[0].status == DS.DEPLOYMENT_STATUS_HEALTHY
    assert app.deployments[0].autoscaling.current_replicas == 4
    await term.deployments.deploy(spec(version="v2"))  # a deploy: UPDATING, not scaling
    await world.settle(term, ticks=1)
    assert term.status()[0].deployments[0].status == DS.DEPLOYMENT_STATUS_UPDATING


def policy_dir(tmp_path: Path, body: str, name: str = "sf_test_policy") -> str:
    (tmp_path / f"{name}.py").write_text(body)
    return str(tmp_path)


async def test_a_custom_policy_from_the_working_dir_decides(
        world: FakeControlPlane, tmp_path: Path) -> None:
    working_dir = policy_dir(tmp_path, "def three(context):\n"
                                       "    return 3 if context.load else 1\n")
    custom = spec(policy="sf_test_policy:three")
    custom.runtime.working_dir = working_dir
    term = await world.lead()
    await term.deployments.deploy(custom)
    report(term, ongoing=1)
    await world.settle(term, ticks=10)
    assert stored_target(term) == 3 and running(term) == 3
    assert term.status()[0].deployments[0].autoscaling.policy_error == ""


async def test_a_policy_that_fails_gives_way_to_the_built_in_one_and_says_why(
        world: FakeControlPlane, tmp_path: Path) -> None:
    policy_dir(tmp_path, "import ctypes, os, time\n"
                         "def broken(context):\n"
                         "    raise RuntimeError('no idea')\n"
                         "def hangs(context):\n"
                         "    time.sleep(60)\n"
                         "def exits(context):\n"
                         "    os._exit(3)\n"
                         "def crashes(context):\n"
                         "    ctypes.string_at(0)\n", name="sf_broken_policy")
    term = await world.lead()
    for policy, words in [("sf_missing_policy:f", "cannot be loaded: ModuleNotFoundError"),
                          ("sf_broken_policy:broken", "RuntimeError: no idea"),
                          ("sf_broken_policy:hangs", "took longer than 2 s to answer"),
                          ("sf_broken_policy:exits", "its process exited with code 3"),
                          ("sf_broken_policy:crashes", "its process exited with code -11")]:
        bad = spec(policy=policy, version=policy.replace(":", "-"))
        bad.runtime.working_dir = str(tmp_path)
        await term.deployments.deploy(bad)
        report(term, ongoing=8)  # the built-in policy wants 8 / 2 = 4
        await world.settle(term, ticks=8)
        (dep,) = term.status()[0].deployments
        assert words in dep.autoscaling.policy_error, (policy, dep.autoscaling)
        assert dep.target_replicas == 4, (policy, dep)
        await term.deployments.delete("default", ["A"])  # the next starts from 1 again
        await world.settle(term, ticks=2)


async def test_a_stored_custom_policy_does_not_run_where_no_user_code_runs(
        world: FakeControlPlane, tmp_path: Path) -> None:
    """--runtime none: a policy already in the store (Deploy now refuses one)
    never starts its runner; the built-in policy decides and status says why."""
    marker = tmp_path / "imported"
    policy_dir(tmp_path, f"open({str(marker)!r}, 'w').close()\n"
                         "def three(context):\n    return 3\n", name="sf_never_policy")
    term = await world.lead()
    term.autoscaler.runs_code = False
    custom = spec(policy="sf_never_policy:three")
    custom.runtime.working_dir = str(tmp_path)
    await term.deployments.deploy(custom)
    report(term, ongoing=8)
    await world.settle(term, ticks=8)
    (dep,) = term.status()[0].deployments
    assert "this controller runs no user code" in dep.autoscaling.policy_error
    assert dep.target_replicas == 4 and not marker.exists()
