"""Request rate and latency per deployment: the proxy's window and the
controller's sum over proxies (pure, fake clocks)."""

from __future__ import annotations

import pytest
from fakes import FakeClock

from servefleet._private.dataplane.traffic import MAX_SAMPLES, WINDOW_S, TrafficWindow
from servefleet.controller.errors import InvalidArgument
from servefleet.controller.load_reports import LoadReports
from servefleet.v1 import controller_pb2 as api


class Tick:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_window_counts_recent_requests_and_their_percentiles() -> None:
    clock = Tick()
    window = TrafficWindow(clock)
    for i in range(100):
        window.add("a/D", (i + 1) / 1000, failed=i % 10 == 0)  # 1..100 ms
        clock.now += 0.01
    requests, span, p50, p99, failed = window.summary()["a/D"]
    assert (requests, span, failed) == (100, WINDOW_S, 10)
    assert p50 == pytest.approx(51) and p99 == pytest.approx(100)
    clock.now += WINDOW_S + 1
    assert window.summary() == {}  # gone once the window has passed


def test_the_window_keeps_a_bounded_sample() -> None:
    clock = Tick()
    window = TrafficWindow(clock)
    for _ in range(MAX_SAMPLES * 3):
        window.add("a/D", 0.001)
    assert window.summary()["a/D"][0] == MAX_SAMPLES * 3  # counts stay exact


def traffic(requests: int, p50: float, p99: float, errors: int = 0) -> dict:
    return {"a/D": api.DeploymentTraffic(requests=requests, window_s=5, p50_ms=p50,
                                         p99_ms=p99, errors=errors)}


def test_the_controller_adds_up_proxies_and_forgets_silent_ones() -> None:
    clock = FakeClock()
    reports = LoadReports(clock)
    assert reports.traffic("a", "D") is None
    reports.record("p1", {}, {}, traffic(50, 2.0, 10.0, errors=5))
    reports.record("p2", {}, {}, traffic(150, 4.0, 30.0, errors=10))
    summed = reports.traffic("a", "D")
    assert summed is not None
    rate, errors, p50, p99 = summed
    assert rate == pytest.approx(40.0) and p50 == pytest.approx(3.5) and p99 == 30.0
    assert errors == pytest.approx(3.0)  # 15 failed in 5 s
    reports.record("p2", {}, {}, {})  # p2 saw nothing lately
    assert reports.traffic("a", "D") == pytest.approx((10.0, 1.0, 2.0, 10.0))
    clock.advance(3)
    assert reports.traffic("a", "D") is None  # p1's report is too old now
    with pytest.raises(InvalidArgument, match="traffic"):
        reports.record("p3", {}, {}, {"a/D": api.DeploymentTraffic(requests=1, window_s=0)})
    with pytest.raises(InvalidArgument, match="errors at most requests"):
        reports.record("p3", {}, {}, traffic(1, 1.0, 1.0, errors=2))


def test_reports_name_the_replicas_their_reporter_ejected() -> None:
    clock = FakeClock()
    reports = LoadReports(clock)
    reports.record("proxy-a", {}, {}, {}, ["Echo-1"])
    reports.record("proxy-b", {}, {}, {}, ["Echo-1", "Echo-2"])
    assert reports.suspects() == {"Echo-1", "Echo-2"}
    reports.record("proxy-b", {}, {}, {}, [])  # b let them back in
    assert reports.suspects() == {"Echo-1"}
    clock.advance(3)  # a's report is stale: it may be gone
    assert reports.suspects() == set()
    with pytest.raises(InvalidArgument, match="ejected"):
        reports.record("proxy-c", {}, {}, {}, ["x" * 200])
    assert reports.suspects() == set()
    # A pool's last replica is not ejected but suspected: checked the same way.
    reports.record("proxy-a", {}, {}, {}, [], ["Solo-1"])
    assert reports.suspects() == {"Solo-1"}
    with pytest.raises(InvalidArgument, match="suspected"):
        reports.record("proxy-c", {}, {}, {}, [], [""])
