"""The chaos suite's invariant checkers (bench/nemesis/checks.py) on
recorded histories: each one passes a good history and catches the broken
history it exists for (a lost write, two leaders at once, a late failure,
a cluster that did not converge), so a checker that cannot fail is caught."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import itertools

from nemesis import checks, report, schedule
from nemesis.history import (
    FAILED,
    OK,
    UNKNOWN,
    Action,
    Fault,
    Final,
    History,
    Op,
    Request,
    Start,
    Write,
)


def op(key: str, value: str, at: float, outcome: str = OK, kind: str = "deploy") -> Op:
    return Op(key, kind, value, at, at + 0.1, outcome)


# -- 1. acknowledged writes -------------------------------------------------

def test_the_last_acknowledged_write_is_what_the_store_must_hold() -> None:
    ops = [op("a/M", "m1", 1), op("a/M", "m2", 2), op("a/Gone", "g1", 1),
           op("a/Gone", "", 3, kind="delete")]
    assert checks.writes_kept(ops, {"a/M": "m2"}).ok


def test_a_lost_acknowledged_write_is_caught() -> None:
    ops = [op("a/M", "m1", 1), op("a/M", "m2", 2)]
    verdict = checks.writes_kept(ops, {"a/M": "m1"})  # m2 was acknowledged, then lost
    assert not verdict.ok
    assert "a/M" in verdict.violations[0] and "'m1'" in verdict.violations[0]


def test_a_lost_delete_and_a_resurrected_deployment_are_caught() -> None:
    ops = [op("a/M", "m1", 1), op("a/M", "", 2, kind="delete")]
    assert not checks.writes_kept(ops, {"a/M": "m1"}).ok
    assert not checks.writes_kept([op("a/M", "m1", 1)], {}).ok  # acknowledged, never stored


def test_a_write_nobody_made_is_caught() -> None:
    assert not checks.writes_kept([], {"a/Phantom": "x"}).ok
    # A refused write must not have happened either.
    assert not checks.writes_kept([op("a/M", "m1", 1, FAILED)], {"a/M": "m1"}).ok


def test_a_write_of_unknown_outcome_may_or_may_not_be_there() -> None:
    ops = [op("a/M", "m1", 1), op("a/M", "m2", 2, UNKNOWN)]
    assert checks.writes_kept(ops, {"a/M": "m1"}).ok
    assert checks.writes_kept(ops, {"a/M": "m2"}).ok
    assert not checks.writes_kept(ops, {"a/M": "m3"}).ok


# -- 2. one leader -----------------------------------------------------------

def test_terms_one_after_another_pass() -> None:
    actions = [Action(1.0, "c1", 10, "starting replica"), Action(5.0, "c1", 10, "x"),
               Action(7.0, "c2", 42, "starting replica"), Action(9.0, "c1", 57, "y")]
    assert checks.one_leader(actions).ok


def test_a_deposed_leader_acting_after_its_successor_began_is_caught() -> None:
    actions = [Action(1.0, "c1", 10, "starting replica"),
               Action(7.0, "c2", 42, "starting replica"),
               Action(7.5, "c1", 10, "stopping replica r-1")]  # c1 woke from SIGSTOP
    verdict = checks.one_leader(actions)
    assert not verdict.ok
    assert "term 10 (c1)" in verdict.violations[0] and "term 42" in verdict.violations[0]


def test_one_term_in_two_controllers_is_caught() -> None:
    actions = [Action(1.0, "c1", 10, "a"), Action(2.0, "c2", 10, "b")]
    assert not checks.one_leader(actions).ok


def test_leader_actions_are_read_from_log_lines_bearing_a_term() -> None:
    lines: list[tuple[str, dict]] = [("c1", {"time": "2026-12-05T10:00:00.000Z", "term": 10,
                     "message": "leading with term 10"}),
             ("c1", {"time": "2026-12-05T10:00:01.250Z", "term": 10,
                     "message": "started replica M-1 as pid 42"}),
             ("c1", {"time": "2026-12-05T10:00:02.000Z", "message": "started replica M-2"}),
             ("c2", {"time": "2026-12-05T10:00:05.000Z", "term": 42,
                     "message": "leading with term 42"}),
             ("c1", {"time": "2026-12-05T10:00:06.000Z", "term": 10,
                     "message": "stopped replica M-1 of a/M"}),
             ("c2", {"time": "2026-12-05T10:00:07.000Z", "term": 42,
                     "message": "replica M-3 of a/M is running"})]
    actions = report.actions_from_logs(lines)
    assert [(a.controller, a.term) for a in actions] == [("c1", 10), ("c1", 10), ("c2", 42),
                                                        ("c1", 10)]
    assert actions[1].time - actions[0].time == 1.25
    # c1 stopped a replica after c2 was elected, before c2's first action:
    # caught because a term begins at its election.
    assert not checks.one_leader(actions).ok


def test_terms_that_only_grow_along_the_store_revisions_pass() -> None:
    writes = [Write(5, 4, "c1"), Write(9, 4, "c1"), Write(12, 11, "c2"), Write(30, 11, "c2")]
    verdict = checks.terms_in_store(writes)
    assert verdict.ok and verdict.checked == 2


def test_a_deposed_leader_writing_after_its_successor_is_caught_in_the_store() -> None:
    # Out of order on purpose: the check orders by revision.
    writes = [Write(12, 11, "c2"), Write(5, 4, "c1"), Write(13, 4, "c1")]
    verdict = checks.terms_in_store(writes)
    assert verdict.violations == ["term 4 (c1) wrote revision 13 after term 11 (c2) wrote "
                                  "revision 12"]


def test_one_term_writing_from_two_controllers_is_caught_in_the_store() -> None:
    assert not checks.terms_in_store([Write(5, 4, "c1"), Write(6, 4, "c3")]).ok


def test_a_process_started_after_a_newer_term_began_is_caught() -> None:
    actions = [Action(1.0, "c1", 4, "leading with term 4"),
               Action(10.0, "c2", 9, "leading with term 9")]
    good = [Start("M-1", 4, 5.0), Start("M-2", 9, 12.0), Start("M-3", 4, 10.03)]
    verdict = checks.starts_within_terms(good, actions)
    assert verdict.ok and verdict.checked == 3
    late = checks.starts_within_terms([Start("M-4", 4, 10.5)], actions)
    assert late.violations == ["replica M-4, registered by term 4, started at 10.500, after "
                               "term 9 began acting at 10.000"]


# -- 3. failed requests ------------------------------------------------------

def request(start: float, end: float, ok: bool = False, via: str = "proxy:p1",
            deployment: str = "a/M") -> Request:
    return Request("http", start, end, ok, [via, f"deployment:{deployment}"], "reset")


def test_a_request_in_flight_at_a_killed_replica_may_fail() -> None:
    faults = [Fault("kill", "replica:a/M/M-1", 5.0, 5.0)]
    assert checks.failures_excused([request(4.9, 5.1)], faults).ok


def test_a_failure_after_the_kill_is_not_excused() -> None:
    # A replica killed at 5 s: a request sent at 8 s was never delivered to
    # it and must have been retried elsewhere.
    faults = [Fault("kill", "replica:a/M/M-1", 5.0, 5.0)]
    verdict = checks.failures_excused([request(8.0, 8.2)], faults)
    assert not verdict.ok
    assert "8.000-8.200" in verdict.violations[0]


def test_a_request_just_after_or_just_before_a_kill_is_not_excused() -> None:
    # Sent 0.2 s after the kill: it reached no dead process (retried elsewhere
    # or it is a failure); ended 0.2 s before it: the kill did not touch it.
    faults = [Fault("kill", "replica:a/M/M-1", 5.0, 5.0)]
    assert not checks.failures_excused([request(5.2, 5.4)], faults).ok
    assert not checks.failures_excused([request(4.6, 4.8)], faults).ok


def test_a_request_sent_to_a_proxy_just_killed_fails_with_it_but_not_later() -> None:
    # Sent on a kept-alive connection 9 ms after the proxy died: no answer at all.
    faults = [Fault("kill", "proxy:p1", 5.0, 5.0)]
    dead_peer = Request("compose", 5.009, 5.014, False, ["proxy:p1", "deployment:a/M"],
                        "RemoteProtocolError: Server disconnected without sending a response.")
    assert checks.failures_excused([dead_peer], faults).ok
    # An answer came: a process answered it, the dead one did not.
    answered = Request("http", 5.009, 5.014, False, ["proxy:p1", "deployment:a/M"],
                       "RuntimeError: HTTP 502: bad gateway")
    late = Request("http", 6.5, 6.6, False, ["proxy:p1", "deployment:a/M"], "ReadError: ")
    other = Request("http", 5.009, 5.014, False, ["proxy:p2", "deployment:a/M"], "ReadError: ")
    for request_ in (answered, late, other):
        assert not checks.failures_excused([request_], faults).ok, request_


def test_a_fault_off_the_requests_path_excuses_nothing() -> None:
    faults = [Fault("kill", "replica:a/Other/Other-1", 5.0, 5.0),
              Fault("kill", "proxy:p2", 5.0, 5.0)]
    assert not checks.failures_excused([request(4.9, 5.1)], faults).ok


def test_control_plane_faults_excuse_no_failed_request() -> None:
    faults = [Fault("kill", "controller:c1", 5.0, 5.0), Fault("quorum", "etcd:e1", 4.0, 9.0),
              Fault("partition", "controller:c2", 4.0, 9.0)]
    verdict = checks.failures_excused([request(4.9, 5.1)], faults)
    assert not verdict.ok and "quorum etcd:e1" in verdict.violations[0]


def test_a_stopped_process_excuses_requests_during_its_stop() -> None:
    faults = [Fault("stop", "proxy:p1", 5.0, 9.0)]
    assert checks.failures_excused([request(6.0, 12.0)], faults).ok
    assert not checks.failures_excused([request(12.0, 12.5)], faults).ok


def test_requests_that_succeeded_need_no_excuse() -> None:
    assert checks.failures_excused([request(1, 2, ok=True)], []).ok


# -- 4. convergence ----------------------------------------------------------

def test_convergence_within_the_bound_passes_and_late_or_never_fails() -> None:
    assert checks.converged(Final(100.0, {"a/M": "m"}, 130.0), 60).ok
    assert not checks.converged(Final(100.0, {"a/M": "m"}, 190.0), 60).ok
    assert not checks.converged(Final(100.0, {"a/M": "m"}, None, waited_s=120), 60).ok
    assert not checks.converged(Final(100.0, {}, 101.0, ["pid 4242 (replica M-9)"]), 60).ok


# -- the schedule and the history's file --------------------------------------

def test_a_seed_reproduces_its_schedule() -> None:
    first = schedule.plan(7, 600)
    assert first == schedule.plan(7, 600)
    assert schedule.digest(first) == schedule.digest(schedule.plan(7, 600))
    assert schedule.digest(first) != schedule.digest(schedule.plan(8, 600))
    gaps = [b.at - a.at for a, b in itertools.pairwise(first)]
    assert all(10 <= g <= 20 for g in gaps) and first[-1].at < 600


def test_the_short_plan_has_each_kind_of_fault_once() -> None:
    steps = schedule.plan(1, 0, every_s=(12, 18), short=True)
    assert sorted(s.fault for s in steps) == sorted(schedule.SHORT)
    assert {s.kind for s in steps} == {f[0] for f in schedule.FAULTS.values()}


def test_an_unknown_fault_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="kill-moon"):
        schedule.plan(1, 60, faults=("kill-moon",))


def test_a_history_survives_its_file(tmp_path) -> None:
    history = History(3, "abc", {"short": True}, [op("a/M", "m1", 1)],
                      [request(1, 2)], [Fault("kill", "proxy:p1", 1, 1)],
                      [Action(1.0, "c1", 5, "x")], [Write(7, 5, "c1")], [Start("M-1", 5, 2.0)],
                      Final(9.0, {"a/M": "m1"}, 10.0))
    history.save(tmp_path / "h.json")
    assert History.load(tmp_path / "h.json") == history
