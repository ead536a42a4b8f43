"""Every replica transition as a pure function (controller/reconcile/transitions.py)."""

from __future__ import annotations

import pytest

from servefleet.controller.reconcile.planner import (
    RECOVERING,
    RUNNING,
    STARTING,
    STOPPING,
    ReplicaView,
    StartupFailures,
)
from servefleet.controller.reconcile.transitions import (
    HEALTH_FAILURE_THRESHOLD,
    Exited,
    HealthChecked,
    Outcome,
    Probed,
    Reconfigured,
    StartFailed,
    Stopped,
    apply,
    learned,
    startup_deadline,
    stopping,
)
from servefleet.v1 import replica_pb2


def view(state: replica_pb2.ReplicaState = STARTING, **fields) -> ReplicaView:
    return ReplicaView("r1", 0, "v1", "h1", state=state, since=100.0, **fields)


def test_a_ready_probe_makes_a_starting_replica_running_and_counts_a_success() -> None:
    out = apply(view(), Probed(ready=True, config_hash="c1"), current=True, now=101.0)
    assert out.view == view(RUNNING, config_hash="c1")
    assert out.started and out.serving_changed
    assert not apply(view(), Probed(ready=True), current=False, now=101.0).started


def test_a_recovering_replica_still_loading_is_starting_again() -> None:
    out = apply(view(RECOVERING), Probed(loading=True), current=True, now=150.0)
    assert out.view is not None and out.view.state == STARTING and out.view.since == 150.0
    assert out.serving_changed  # it left the serving set
    assert apply(view(), Probed(loading=True), current=True, now=150.0).view == view()


@pytest.mark.parametrize(("seen", "counted"), [
    (Probed(failure="ValueError: boom"), True),
    (Probed(failure="port taken", bind_failure=True), False),
    (StartFailed("could not start: OSError"), True),
    (StartFailed("could not start: the store is down", counted=False), False),
    (Exited("replica exited with code 1"), True),
    (Exited("replica exited with code 3", bind_failure=True), False),
])
def test_start_failures_count_only_when_the_replica_is_at_fault(seen, counted) -> None:
    out = apply(view(), seen, current=True, now=101.0)
    assert out.view is not None and out.view.failure and out.view.failed_starting
    assert bool(out.failed_start) == counted and out.hold_starts == (not counted)
    # An old version's replica failing is not the current goal's failure.
    assert not apply(view(), seen, current=False, now=101.0).failed_start


def test_a_running_replica_that_exits_is_an_incident() -> None:
    out = apply(view(RUNNING), Exited("replica exited with code -9"), current=True, now=1.0)
    assert out.view is not None and out.view.failure == "replica exited with code -9"
    assert not out.view.failed_starting and not out.failed_start
    assert "replica r1 was replaced" in out.incident and out.serving_changed


def test_health_failures_count_up_to_the_threshold_and_a_pass_clears_them() -> None:
    current = view(RUNNING)
    for i in range(1, HEALTH_FAILURE_THRESHOLD):
        out = apply(current, HealthChecked("health check failed: slow"), current=True, now=1.0)
        assert out.view is not None and out.view.health_failures == i and not out.view.failure
        current = out.view
    healthy = apply(current, HealthChecked(), current=True, now=1.0).view
    assert healthy is not None and healthy.health_failures == 0 and healthy.message == ""
    out = apply(current, HealthChecked("health check failed: slow"), current=True, now=1.0)
    assert out.view is not None
    assert out.view.failure == "health check failed: slow (3 times in a row)"
    assert out.incident


def test_reconfigure_results() -> None:
    done = apply(view(RUNNING), Reconfigured("c2"), current=True, now=1.0)
    assert done.view == view(RUNNING, config_hash="c2")
    failed = apply(view(RUNNING), Reconfigured(error="ValueError: bad config"), current=True,
                   now=1.0)
    assert failed.view is not None and "reconfigure failed: ValueError" in failed.view.failure


def test_the_startup_deadline() -> None:
    assert startup_deadline(view(), 399.0, 300.0, current=True) is None
    out = startup_deadline(view(), 400.0, 300.0, current=True)
    assert out is not None and out.view is not None
    assert "did not become ready within startup_timeout_s (300 s)" in out.failed_start
    assert startup_deadline(view(RUNNING), 1e9, 300.0, current=True) is None
    assert startup_deadline(view(failure="x"), 1e9, 300.0, current=True) is None


def test_once_stopping_only_the_stop_counts() -> None:
    going = stopping(view(RUNNING))
    assert going.view is not None and going.view.state == STOPPING and going.serving_changed
    for seen in (Probed(ready=True), HealthChecked("x"), Exited("gone"), StartFailed("x")):
        assert apply(going.view, seen, current=True, now=1.0) == Outcome(going.view)
    gone = apply(going.view, Stopped(), current=True, now=1.0)
    assert gone.view is None


def test_what_the_failure_record_learns() -> None:
    failures = StartupFailures()
    counted = learned(failures, Outcome(view(), failed_start="boom"), 10.0)
    assert counted.count == 1 and counted.last_error == "boom"
    assert counted.next_attempt_at == 10.5 and failures.count == 0  # a new record
    held = learned(failures, Outcome(view(), hold_starts=True), 10.0)
    assert held.count == 0 and held.next_attempt_at == 11.0
    assert learned(counted, Outcome(view(), started=True), 11.0).count == 0
    assert learned(failures, Outcome(view(), incident="x"), 1.0).incident == "x"


def test_a_suspect_that_fails_its_check_is_replaced_at_once() -> None:
    """A replica proxies ejected is checked at once; one failure replaces it."""
    out = apply(view(RUNNING), HealthChecked("health check failed: deadline", suspect=True),
                current=True, now=1.0)
    assert out.view is not None and "proxies stopped getting answers" in out.view.failure
    assert out.incident
    passed = apply(view(RUNNING), HealthChecked(), current=True, now=1.0)
    assert passed.view == view(RUNNING)


def test_a_suspect_that_serves_alone_fails_like_any_checked_replica() -> None:
    """The only serving replica of its deployment is not replaced on one
    failed check, suspect or not: HEALTH_FAILURE_THRESHOLD in a row."""
    seen = HealthChecked("health check failed: deadline", suspect=True)
    out = apply(view(RUNNING), seen, current=True, now=1.0, alone=True)
    for _ in range(HEALTH_FAILURE_THRESHOLD - 2):
        assert out.view is not None and not out.view.failure
        out = apply(out.view, seen, current=True, now=1.0, alone=True)
    assert out.view is not None and not out.view.failure and out.view.health_failures == \
        HEALTH_FAILURE_THRESHOLD - 1
    out = apply(out.view, seen, current=True, now=1.0, alone=True)
    assert out.view is not None and "3 times in a row" in out.view.failure
    assert "proxies stopped getting answers" in out.view.failure and out.incident


def test_a_suspect_that_passes_its_check_is_cleared_for_the_proxies() -> None:
    """Its endpoint's `cleared` grows, and the replica set is published again:
    proxies and handles that ejected it take it back before their period ends."""
    out = apply(view(RUNNING), HealthChecked(suspect=True), current=True, now=1.0)
    assert out.view is not None and out.view.cleared == 1 and out.serving_changed
    again = apply(out.view, HealthChecked(suspect=True), current=True, now=2.0)
    assert again.view is not None and again.view.cleared == 2
    routine = apply(again.view, HealthChecked(), current=True, now=3.0)
    assert routine.view == again.view and not routine.serving_changed
