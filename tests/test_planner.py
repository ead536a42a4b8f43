"""Unit tests of the replica planner: pure decisions under a fake clock."""

from __future__ import annotations

import dataclasses

import pytest

from servefleet.controller.reconcile.planner import (
    Goal,
    Plan,
    ReplicaView,
    StartupFailures,
    plan_deployment,
    retry_cap,
)
from servefleet.v1 import replica_pb2, status_pb2

RS = replica_pb2.ReplicaState
DS = status_pb2.DeploymentStatus
RUNNING, STARTING, STOPPING = (RS.REPLICA_STATE_RUNNING, RS.REPLICA_STATE_STARTING,
                               RS.REPLICA_STATE_STOPPING)


def goal(target: int = 3, version: str = "v1", config: str = "c1") -> Goal:
    return Goal(version=version, code_hash="h-" + version, target=target, config_hash=config)


def replica(rid: str, slot: int, version: str = "v1", state: RS = RUNNING,
            config: str = "c1") -> ReplicaView:
    # Ranked as its slot: the planner leaves such ranks alone (test_ranks.py).
    return ReplicaView(replica_id=rid, slot=slot, version=version, code_hash="h-" + version,
                       state=state, config_hash=config, rank=slot)


def plan_of(g: Goal, views: list[ReplicaView], failures: StartupFailures,
            now: float) -> Plan:
    return plan_deployment(g, views, failures, now)[0]


def run_until_stable(g: Goal, views: list[ReplicaView], steps: int = 50):
    """Apply plans as an ideal executor would (starts become RUNNING next step)."""
    failures, history, counter = StartupFailures(), [], 0
    for _ in range(steps):
        plan, failures = plan_deployment(g, views, failures, now=0.0)
        history.append((plan, [(v.replica_id, v.version, v.state) for v in views]))
        stopped = set(plan.stop)
        views = [dataclasses.replace(v, state=RUNNING) if v.state == STARTING else v
                 for v in views if v.replica_id not in stopped]
        for slot in plan.start_slots:
            counter += 1
            views.append(replica(f"n{counter}", slot, g.version, STARTING, g.config_hash))
        if not plan.start_slots and not plan.stop and plan.status == DS.DEPLOYMENT_STATUS_HEALTHY:
            return views, history
    raise AssertionError("did not converge")


def test_scale_up_from_nothing_fills_slots() -> None:
    plan = plan_of(goal(3), [], StartupFailures(), 0.0)
    assert plan.start_slots == [0, 1, 2] and plan.stop == []
    assert plan.status == DS.DEPLOYMENT_STATUS_UPDATING


def test_healthy_when_target_running() -> None:
    views = [replica("a", 0), replica("b", 1), replica("c", 2)]
    plan = plan_of(goal(3), views, StartupFailures(), 0.0)
    assert (plan.start_slots, plan.stop, plan.reconfigure) == ([], [], [])
    assert plan.status == DS.DEPLOYMENT_STATUS_HEALTHY


def test_scale_down_stops_starting_first_then_highest_slots() -> None:
    views = [replica("a", 0), replica("b", 1), replica("c", 2), replica("d", 3, state=STARTING)]
    plan = plan_of(goal(2), views, StartupFailures(), 0.0)
    assert plan.stop == ["d", "c"]


def test_rolling_update_keeps_target_running_and_limits_in_flight() -> None:
    old = [replica(f"o{i}", i, "v1") for i in range(10)]
    views, history = run_until_stable(goal(10, "v2"), old)
    assert sorted(v.slot for v in views) == list(range(10))
    assert {v.version for v in views} == {"v2"}
    for plan, seen in history:
        running = [s for s in seen if s[2] == RUNNING]
        old_left = [s for s in seen if s[1] == "v1"]
        if old_left:
            assert len(running) >= 10, "fewer RUNNING than the target while old ones remain"
        starting = [s for s in seen if s[2] == STARTING]
        assert len(starting) + len(plan.start_slots) <= 2, "more than 20% of 10 in flight"


def test_rollout_of_one_replica_surges_by_one() -> None:
    views = [replica("o", 0, "v1")]
    plan = plan_of(goal(1, "v2"), views, StartupFailures(), 0.0)
    assert plan.start_slots == [0] and plan.stop == []
    views.append(replica("n", 0, "v2", STARTING))
    plan = plan_of(goal(1, "v2"), views, StartupFailures(), 0.0)
    assert plan.stop == [] and plan.start_slots == []
    views[1] = dataclasses.replace(views[1], state=RUNNING)
    plan = plan_of(goal(1, "v2"), views, StartupFailures(), 0.0)
    assert plan.stop == ["o"]


def test_lightweight_change_reconfigures_in_place() -> None:
    views = [replica("a", 0), replica("b", 1, state=STARTING)]
    plan = plan_of(goal(2, config="c2"), views, StartupFailures(), 0.0)
    assert plan.reconfigure == ["a"] and plan.start_slots == [] and plan.stop == []


def test_failed_replica_is_stopped_and_replaced() -> None:
    views = [replica("a", 0), replica("b", 1)]
    views[1] = dataclasses.replace(views[1],
                                   failure="health check failed: boom (3 times in a row)")
    plan = plan_of(goal(2), views, StartupFailures(), 0.0)
    assert plan.stop == ["b"] and plan.start_slots == [1]
    assert plan.status == DS.DEPLOYMENT_STATUS_UNHEALTHY
    assert "boom" in plan.message


def test_startup_failures_back_off_then_stop_until_the_goal_changes() -> None:
    g = goal(2)
    failures = StartupFailures()
    now = 100.0
    failed_starts = 0
    while True:
        plan, failures = plan_deployment(g, [], failures, now)
        if plan.status == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED:
            break
        for _ in plan.start_slots:  # every replica started fails
            failed_starts += 1
            failures = failures.failed("ValueError: bad constructor", now)
        if plan.start_slots:
            # Right after a failure, nothing starts until the backoff passes.
            assert plan_of(g, [], failures, now + 0.01).start_slots == []
        now += 1.0
        assert now < 1000
    assert failed_starts == retry_cap(2) == 6
    assert "ValueError: bad constructor" in plan.message
    assert plan_of(g, [], failures, now + 1e6).start_slots == []  # stopped hammering
    fixed = goal(2, version="v2")
    assert plan_of(fixed, [], failures, now).start_slots == [0, 1]


def test_backoff_grows_to_its_ceiling() -> None:
    failures = StartupFailures()
    delays = []
    for _ in range(10):
        failures = failures.failed("x", 0.0)
        delays.append(failures.next_attempt_at)
    assert delays[:6] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]  # the loop's one BACKOFF
    assert max(delays) == 10.0


def test_planning_changes_none_of_its_arguments() -> None:
    views = [replica("a", 0), replica("b", 1)]
    before = list(views)
    failures = StartupFailures(token=goal(2).token, incident="replica x was replaced")
    plan, after = plan_deployment(goal(2), views, failures, 0.0)
    assert views == before and failures.incident == "replica x was replaced"
    # Back at its target: healthy, and the new record has the incident settled.
    assert after.incident == "" and plan.status == DS.DEPLOYMENT_STATUS_HEALTHY
    with pytest.raises(dataclasses.FrozenInstanceError):
        views[0].state = RUNNING  # type: ignore[misc]


def test_recovering_replicas_are_not_stopped_mid_rollout() -> None:
    """After a failover every replica is RECOVERING: nothing may be stopped yet."""
    views = [replica(f"o{i}", i, "v1", RS.REPLICA_STATE_RECOVERING) for i in range(3)]
    views.append(replica("n0", 0, "v2", RS.REPLICA_STATE_RECOVERING))
    plan = plan_of(goal(3, "v2"), views, StartupFailures(), 0.0)
    assert plan.stop == []
    assert plan.start_slots == []  # the recovering v2 replica fills the rollout budget


def test_recovered_replicas_keep_a_settled_deployment_healthy() -> None:
    """Right after a failover its replicas are RECOVERING and serving: the
    deployment stays HEALTHY (its application RUNNING) while they are probed."""
    views = [replica(f"r{i}", i, "v1", RS.REPLICA_STATE_RECOVERING) for i in range(2)]
    plan = plan_of(goal(2), views, StartupFailures(), 0.0)
    assert (plan.start_slots, plan.stop) == ([], [])
    assert plan.status == DS.DEPLOYMENT_STATUS_HEALTHY
    short = plan_of(goal(3), views, StartupFailures(), 0.0)
    assert short.status == DS.DEPLOYMENT_STATUS_UPDATING and short.start_slots == [2]


def test_deleted_goal_stops_everything() -> None:
    views = [replica("a", 0), replica("b", 1, state=STARTING),
             replica("c", 2, state=STOPPING)]
    g = Goal("v1", "h-v1", 3, "c1", deleted=True)
    plan = plan_of(g, views, StartupFailures(), 0.0)
    assert sorted(plan.stop) == ["a", "b"] and plan.start_slots == []


def test_new_version_failing_keeps_old_serving() -> None:
    old = [replica("o0", 0), replica("o1", 1)]
    failures = StartupFailures(token=goal(2, "v2").token, count=retry_cap(2))
    plan = plan_of(goal(2, "v2"), old, failures, 0.0)
    assert plan.stop == [] and plan.start_slots == []
    assert plan.status == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED


def test_the_last_failed_start_is_named_while_nothing_serves() -> None:
    failures = StartupFailures(token=goal(2, "v2").token).failed("ValueError: no weights", 0.0)
    assert plan_of(goal(2, "v2"), [], failures, 0.0).start_error == "ValueError: no weights"
    old = [replica("o0", 0), replica("o1", 1)]  # the older version serves meanwhile
    assert plan_of(goal(2, "v2"), old, failures, 0.0).start_error == ""
    assert plan_of(goal(2, "v2"), [], failures.succeeded(), 0.0).start_error == ""


def test_a_new_incarnation_or_a_retry_starts_over() -> None:
    first = dataclasses.replace(goal(1), created=1)
    gave_up = StartupFailures(token=first.token, count=retry_cap(1), last_error="x",
                              incident="replica r was replaced: exited")
    assert gave_up.gave_up(first)
    assert plan_of(first, [], gave_up, 0.0).start_slots == []
    # The same spec, deleted and deployed again: a fresh record, without the incident.
    again = dataclasses.replace(first, created=2)
    plan, after = plan_deployment(again, [], gave_up, 0.0)
    assert plan.start_slots == [0] and (after.count, after.incident) == (0, "")
    # Deployed again unchanged after giving up: retried at once.
    retried = gave_up.retried()
    assert not retried.gave_up(first) and plan_of(first, [], retried, 0.0).start_slots == [0]
