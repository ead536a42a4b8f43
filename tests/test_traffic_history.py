"""The controller's fifteen minutes of traffic per deployment and its list of
failed requests (controller/traffic_history.py), and the checks of the
failed requests a report carries (load_reports.py). Pure, fake clocks."""

from __future__ import annotations

import math

import pytest
from fakes import FakeClock

from servefleet.controller.errors import InvalidArgument
from servefleet.controller.load_reports import MAX_RECENT_ERRORS, LoadReports
from servefleet.controller.traffic_history import (
    INTERVAL_S,
    MAX_ERRORS,
    POINTS,
    SPAN_S,
    HistorySampler,
    TrafficHistory,
)
from servefleet.v1 import controller_pb2 as api


def failure(request_id: str, at: float = 1000.0, **fields) -> api.RecentError:
    values = {"application": "a", "deployment": "D", "route": "/d", "http_status": 500,
              "request_id": request_id, "time_unix_s": at, **fields}
    return api.RecentError(**values)


def test_a_point_is_due_every_interval() -> None:
    clock = FakeClock()
    history = TrafficHistory(clock)
    assert history.due()
    history.sample({("a", "D"): (None, 1)})
    assert not history.due()
    clock.advance(INTERVAL_S - 0.1)
    assert not history.due()
    clock.advance(0.1)
    assert history.due()


def test_points_older_than_fifteen_minutes_are_dropped() -> None:
    clock = FakeClock()
    history = TrafficHistory(clock)
    assert POINTS == SPAN_S / INTERVAL_S == 180
    for i in range(POINTS + 40):
        clock.advance(INTERVAL_S)
        history.sample({("a", "D"): (None, i)})
    points = history.series("a", "D")
    assert len(points) == POINTS
    assert [p.running for p in points] == list(range(40, POINTS + 40))  # the latest kept
    assert clock.now - points[0].time < SPAN_S
    # A pause in sampling (a stalled loop): the old points go all the same.
    clock.advance(SPAN_S - 100)
    assert len(history.series("a", "D")) == 100 / INTERVAL_S
    history.sample({("a", "D"): (None, 7)})
    assert len(history.series("a", "D")) == 100 / INTERVAL_S + 1
    clock.advance(SPAN_S)
    assert history.series("a", "D") == []  # nothing read back is older than the span


def test_a_deployment_gone_loses_its_series() -> None:
    history = TrafficHistory(FakeClock())
    history.sample({("a", "D"): (None, 1), ("a", "E"): (None, 2)})
    history.sample({("a", "E"): (None, 2)})
    assert history.keys() == [("a", "E")] and history.series("a", "D") == []


def traffic(requests: int, errors: int, p50: float, p99: float) -> dict:
    return {"a/D": api.DeploymentTraffic(requests=requests, window_s=5, p50_ms=p50,
                                         p99_ms=p99, errors=errors)}


def test_points_sum_the_proxies_as_get_status_does() -> None:
    clock = FakeClock()
    reports = LoadReports(clock)
    history = TrafficHistory(clock)
    running = {("a", "D"): 3, ("a", "Idle"): 1}
    sampler = HistorySampler(history, lambda: {key: (reports.traffic(*key), n)
                                               for key, n in running.items()})
    reports.record("p1", {}, {}, traffic(50, 5, 2.0, 10.0))
    reports.record("p2", {}, {}, traffic(150, 10, 4.0, 30.0))
    sampler.end_pass(clock.monotonic())
    sampler.end_pass(clock.monotonic())  # not due yet: one point
    (point,) = history.series("a", "D")
    assert point.requests_per_s == pytest.approx(40.0)  # 200 requests in 5 s
    assert point.errors_per_s == pytest.approx(3.0)
    assert point.p50_ms == pytest.approx(3.5) and point.p99_ms == 30.0  # weighted, highest
    assert (point.running, point.time) == (3, clock.time())
    (idle,) = history.series("a", "Idle")  # no requests: zero rates, no latencies
    assert (idle.requests_per_s, idle.errors_per_s, idle.p50_ms, idle.p99_ms, idle.running) \
        == (0.0, 0.0, None, None, 1)
    clock.advance(INTERVAL_S)  # the reports are stale by now: no traffic
    running[("a", "D")] = 4
    sampler.end_pass(clock.monotonic())
    assert [(p.requests_per_s, p.running) for p in history.series("a", "D")] == [
        (pytest.approx(40.0), 3), (0.0, 4)]


def test_failed_requests_newest_first_one_per_request_id() -> None:
    history = TrafficHistory(FakeClock())
    history.add_errors([failure("r1", 1.0), failure("r2", 2.0)])
    history.add_errors([failure("r3", 3.0), failure("r1", 4.0, http_status=503)])
    assert [(e.request_id, e.time_unix_s) for e in history.recent_errors()] == [
        ("r1", 4.0), ("r3", 3.0), ("r2", 2.0)]
    assert history.recent_errors()[0].http_status == 503  # the latest failure of r1
    # Failures without an id are never merged.
    history.add_errors([failure(""), failure("")])
    assert [e.request_id for e in history.recent_errors()] == ["", "", "r1", "r3", "r2"]


def test_failed_requests_are_bounded() -> None:
    history = TrafficHistory(FakeClock())
    for batch in range(10):
        history.add_errors([failure(f"r{batch}-{i}", batch * 100 + i) for i in range(20)])
    kept = history.recent_errors()
    assert len(kept) == MAX_ERRORS == 50
    assert kept[0].request_id == "r9-19" and kept[-1].request_id == "r7-10"


def test_a_reports_failures_reach_the_history_once_checked() -> None:
    clock = FakeClock()
    history = TrafficHistory(clock)
    reports = LoadReports(clock, on_errors=history.add_errors)
    reports.record("p1", {}, {}, traffic(10, 1, 1.0, 2.0), recent_errors=[
        failure("r1"), failure("r2", grpc_code="INTERNAL", http_status=0, route="pkg.Svc",
                               trace_id="4bf92f3577b34da6a3ce929d0e0e4736")])
    assert [(e.request_id, e.grpc_code, e.trace_id) for e in history.recent_errors()] == [
        ("r2", "INTERNAL", "4bf92f3577b34da6a3ce929d0e0e4736"), ("r1", "", "")]
    with pytest.raises(InvalidArgument, match=r"recent_errors\[1\]\.trace_id"):
        reports.record("p2", {"a/D": 5}, {}, traffic(10, 1, 1.0, 2.0), recent_errors=[
            failure("r3"), failure("r4", trace_id="not-hex")])
    # Nothing of the bad report was kept: not its failures, load or traffic.
    assert len(history.recent_errors()) == 2
    assert reports.queued("a", "D") == 0
    assert reports.traffic("a", "D").requests_per_s == pytest.approx(2.0)  # p1's alone


@pytest.mark.parametrize(("fields", "named"), [
    ({"time_unix_s": math.nan}, "time_unix_s"),
    ({"time_unix_s": -1.0}, "time_unix_s"),
    ({"application": "no/slash"}, "application"),
    ({"application": ""}, "application"),  # a deployment names its application
    ({"deployment": "x" * 300}, "deployment"),
    ({"http_status": 0}, "http_status"),  # neither status nor code
    ({"grpc_code": "INTERNAL"}, "http_status"),  # both
    ({"http_status": 600}, "http_status"),
    ({"http_status": 0, "grpc_code": "internal"}, "grpc_code"),
    ({"http_status": 0, "grpc_code": "X" * 40}, "grpc_code"),
    ({"route": "/" * 257}, "route"),
    ({"request_id": "r" * 129}, "request_id"),
    ({"trace_id": "4BF92F3577B34DA6A3CE929D0E0E4736"}, "trace_id"),
    ({"trace_id": "abc"}, "trace_id"),
])
def test_bad_failures_are_refused_naming_the_field(fields: dict, named: str) -> None:
    reports = LoadReports(FakeClock())
    with pytest.raises(InvalidArgument, match=rf"recent_errors\[0\]\.{named}"):
        reports.record("p1", {}, {}, recent_errors=[failure(**{"request_id": "r1", **fields})])


def test_a_report_carries_a_bounded_number_of_failures() -> None:
    reports = LoadReports(FakeClock())
    reports.record("p1", {}, {}, recent_errors=[failure(f"r{i}")
                                                for i in range(MAX_RECENT_ERRORS)])
    with pytest.raises(InvalidArgument, match="recent_errors"):
        reports.record("p1", {}, {}, recent_errors=[failure(f"r{i}")
                                                    for i in range(MAX_RECENT_ERRORS + 1)])
    # Unrouted failures (no deployment; no application either) are fine.
    reports.record("p1", {}, {}, recent_errors=[failure("r", application="", deployment="",
                                                        route="")])
