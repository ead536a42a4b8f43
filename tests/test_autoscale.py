"""The autoscaling policy and the load window, as pure functions (unit tests)."""

from __future__ import annotations

import pytest

from servefleet.controller.load_window import LoadWindow
from servefleet.controller.reconcile.autoscale import (
    AutoscalingContext,
    Decision,
    PolicyFailed,
    desired_replicas,
    evaluate,
)
from servefleet.v1 import deployment_pb2 as d


def config(**fields) -> d.AutoscalingConfig:
    values = {"min_replicas": 1, "max_replicas": 10, "target_ongoing_requests": 2,
              "upscale_delay_s": 3, "downscale_delay_s": 10, "downscale_to_zero_delay_s": 20,
              "upscaling_factor": 1, "downscaling_factor": 1, "look_back_period_s": 5,
              "aggregation_function": "mean", **fields}
    return d.AutoscalingConfig(**values)


def run(cfg: d.AutoscalingConfig, decision: Decision, load: float, seconds: float,
        start: float, step: float = 0.5, **kw) -> tuple[Decision, list[tuple[float, int]]]:
    """Evaluate every `step` s for `seconds` with a steady load and as many
    replicas running as the target; returns the decision and (time, target) changes."""
    changes, now = [], start
    while now <= start + seconds + 1e-9:
        after = evaluate(cfg, decision, load, decision.target, now, **kw)
        if after.target != decision.target:
            changes.append((round(now - start, 3), after.target))
        decision, now = after, now + step
    return decision, changes


@pytest.mark.parametrize(("load", "running", "fields", "expected"), [
    (16, 2, {}, 8),  # 16 ongoing at 2 per replica
    (17, 2, {}, 9),  # rounded up
    (100, 2, {}, 10),  # clamped to max_replicas
    (0, 5, {}, 1),  # clamped to min_replicas
    (16, 2, {"upscaling_factor": 0.5}, 5),  # ceil(2 + 0.5 * (8 - 2))
    (2, 8, {"downscaling_factor": 0.5}, 5),  # ceil(8 + 0.5 * (1 - 8))
    (5, 4, {"downscaling_factor": 0.01}, 3),  # a step that rounds back to 4 goes one down
    (7, 4, {"downscaling_factor": 0.01}, 4),  # 3.5 wanted: 4 are needed
    (0, 1, {"min_replicas": 0, "downscaling_factor": 0.01}, 0),
    (5, 0, {"min_replicas": 0, "upscaling_factor": 0.1}, 3),  # from zero: no factor
])
def test_desired_replicas(load: float, running: int, fields: dict, expected: int) -> None:
    assert desired_replicas(config(**fields), load, running) == expected


def test_scale_up_waits_for_the_upscale_delay_of_steady_load() -> None:
    decision, changes = run(config(), Decision(target=1), load=8, seconds=5, start=100)
    assert changes == [(3.0, 4)]
    assert "up from 1 to 4" in decision.reason and decision.load == 8


def test_a_dip_restarts_the_wait() -> None:
    cfg, decision = config(), Decision(target=1)
    for now in (100, 101, 102):
        decision = evaluate(cfg, decision, 8, 1, now)
    decision = evaluate(cfg, decision, 2, 1, 102.5)  # back at the target: the wait is over
    for now in (103, 104, 105):
        decision = evaluate(cfg, decision, 8, 1, now)
    assert decision.target == 1
    assert evaluate(cfg, decision, 8, 1, 106).target == 4


def test_scale_down_to_one_then_to_zero_with_their_own_delays() -> None:
    cfg = config(min_replicas=0)
    decision, changes = run(cfg, Decision(target=4), load=0, seconds=40, start=0)
    # 10 s to go down (never below one on the way), then 20 s more to go to zero.
    assert changes == [(10.0, 1), (30.0, 0)]
    assert decision.target == 0


def test_min_replicas_holds_and_zero_needs_min_zero() -> None:
    decision, changes = run(config(min_replicas=2), Decision(target=4), load=0, seconds=60,
                            start=0)
    assert changes == [(10.0, 2)] and decision.target == 2


def test_from_zero_any_load_starts_replicas_at_once() -> None:
    cfg = config(min_replicas=0, upscale_delay_s=60, upscaling_factor=2.5)
    decision = evaluate(cfg, Decision(target=0), 1, 0, 50.0)
    assert decision.target == 3  # max(1, ceil(2.5)), no waiting for upscale_delay_s
    assert "from zero" in decision.reason
    assert evaluate(cfg, Decision(target=0), 0, 0, 50.0).target == 0


def test_no_load_figure_changes_nothing() -> None:
    decision = Decision(target=3, leaning=1, since=7.0)
    assert evaluate(config(), decision, None, 3, 100.0) is decision


def test_a_new_leader_continues_from_the_stored_target() -> None:
    # After a failover only the target survives (hard state); the steady load
    # that put it there keeps it there instead of snapping back.
    decision, changes = run(config(initial_replicas=1), Decision(target=4), load=8,
                            seconds=30, start=0)
    assert changes == [] and decision.target == 4


def test_a_custom_policy_decides_and_the_delays_and_bounds_still_apply() -> None:
    seen: list[AutoscalingContext] = []

    def every_request_a_replica(context: AutoscalingContext) -> float:
        seen.append(context)
        return context.load * 10

    cfg = config(policy="mine:every_request_a_replica")
    decision, changes = run(cfg, Decision(target=1), load=3, seconds=4, start=0,
                            custom=every_request_a_replica, application="a", deployment="M")
    # 30 clamped to max_replicas, after upscale_delay_s
    assert changes == [(3.0, 10)] and decision.error == ""
    assert seen[0].deployment == "M" and seen[0].current_replicas == 1
    assert seen[0].config.max_replicas == 10 and seen[0].config is not cfg


def test_a_failing_custom_policy_gives_way_to_the_built_in_one_and_says_why() -> None:
    def broken(context: AutoscalingContext) -> float:
        raise ZeroDivisionError("oops")

    cfg = config(policy="mine:broken")
    # The built-in policy: load 50 at 2 per replica asks for 25, clamped to 10.
    decision, changes = run(cfg, Decision(target=2), load=50, seconds=10, start=0,
                            custom=broken)
    assert changes == [(3.0, 10)] and decision.target == 10
    assert "mine:broken: ZeroDivisionError: oops" in decision.error
    nonsense = evaluate(cfg, decision, 50, 10, 11.0, custom=lambda c: float("nan"))
    assert nonsense.desired == 10 and "expected a replica count" in nonsense.error
    gone = evaluate(cfg, decision, 50, 10, 11.5,
                    custom=lambda c: (_ for _ in ()).throw(PolicyFailed("its process exited")))
    assert gone.error == "its process exited"  # the runner's own words, as they are
    healed = evaluate(cfg, decision, 50, 10, 12.0, custom=lambda c: 2)
    assert healed.error == "" and healed.desired == 2


def test_the_window_mean_is_time_weighted() -> None:
    window = LoadWindow()
    window.add(0.0, 10)
    window.add(4.0, 0)  # 10 for 4 s, then 0 for 1 s
    assert window.aggregate(5.0, 30) == pytest.approx(8.0)
    # A 2 s window starting at 3.0: 10 for 1 s, 0 for 1 s.
    assert window.aggregate(5.0, 2) == pytest.approx(5.0)


def test_the_window_max_and_min_and_forgetting() -> None:
    window = LoadWindow()
    assert window.aggregate(1.0, 5) is None
    for at, total in [(0.0, 3), (1.0, 9), (2.0, 1), (10.0, 4)]:
        window.add(at, total)
    assert window.aggregate(10.0, 20, "max") == 9
    assert window.aggregate(10.0, 20, "min") == 1
    # 5 s back: only the value 1 (holding since 2.0) and 4 are in the window.
    assert window.aggregate(10.0, 5, "max") == 4
    assert window.aggregate(10.0, 5, "min") == 1
    assert window.aggregate(30.0, 5, "max") == 4  # the last value holds
    window.add(30.0, 7)
    window.add(30.0, 8)  # the same instant: the newer report wins
    assert window.latest() == 8
