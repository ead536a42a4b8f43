"""What a proxy tells the controller of its failed answers: the count per
deployment (traffic.py), and each failure with its request and trace ids
since the last report (recent_errors.py, proxy/metrics.py). Pure."""

from __future__ import annotations

import contextvars

import pytest

from servefleet._private.dataplane.recent_errors import MAX_ERRORS, MAX_ID, RecentErrors
from servefleet._private.observability.logs import REQUEST_ID
from servefleet._private.tracing import spans as tracing
from servefleet.controller.load_reports import check_recent_errors
from servefleet.proxy.metrics import ProxyMetrics


def test_failures_are_taken_once_and_the_latest_kept() -> None:
    errors = RecentErrors(clock=lambda: 1234.5)
    assert errors.take() == []
    for i in range(MAX_ERRORS + 5):
        errors.add("a", "D", "/d", 500, "", f"r{i}", "")
    taken = errors.take()
    assert [e.request_id for e in taken] == [f"r{i}" for i in range(5, MAX_ERRORS + 5)]
    assert taken[0].time_unix_s == 1234.5 and taken[0].http_status == 500
    assert errors.take() == []  # only the ones since the last report


def test_what_a_client_sent_is_cut_to_what_the_controller_takes() -> None:
    errors = RecentErrors()
    errors.add("a", "D", "/" * 1000, 502, "", "x" * 10_000, "")
    (taken,) = errors.take()
    assert len(taken.request_id) == MAX_ID
    check_recent_errors([taken])  # no InvalidArgument


def answer(metrics: ProxyMetrics, request_id: str, code: int, route: str = "/d") -> None:
    """As the proxy calls it: in the request's own context."""
    def run() -> None:
        REQUEST_ID.set(request_id)
        metrics.answered("a", "D", route, code, 0.01)
    contextvars.copy_context().run(run)


def test_the_proxy_lists_answers_of_500_and_above_with_their_request_id() -> None:
    metrics = ProxyMetrics()
    for request_id, code in (("ok", 200), ("missing", 404), ("left", 499), ("boom", 500),
                             ("gone", 503)):
        answer(metrics, request_id, code)
    taken = metrics.errors.take()
    assert [(e.request_id, e.http_status, e.application, e.deployment, e.route, e.trace_id)
            for e in taken] == [("boom", 500, "a", "D", "/d", ""), ("gone", 503, "a", "D",
                                                                     "/d", "")]
    requests, _, _, _, failed = metrics.traffic.summary()["a/D"]
    assert (requests, failed) == (5, 2)
    check_recent_errors(taken)


def test_grpc_calls_that_end_with_a_code_other_than_ok_are_failures() -> None:
    metrics = ProxyMetrics()

    def call(request_id: str, code: str) -> None:
        REQUEST_ID.set(request_id)
        metrics.grpc_answered("a", "D", "pkg.Svc", code, 0.01)

    for request_id, code in (("fine", "OK"), ("bad", "INTERNAL"), ("down", "UNAVAILABLE")):
        contextvars.copy_context().run(call, request_id, code)
    taken = metrics.errors.take()
    assert [(e.request_id, e.grpc_code, e.http_status, e.route) for e in taken] == [
        ("bad", "INTERNAL", 0, "pkg.Svc"), ("down", "UNAVAILABLE", 0, "pkg.Svc")]
    assert metrics.traffic.summary()["a/D"][4] == 2
    check_recent_errors(taken)


def test_a_failure_under_a_span_carries_its_trace_id() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider

    tracing.install(TracerProvider().get_tracer("test"))
    try:
        metrics = ProxyMetrics()

        def serve() -> str:
            served = tracing.serve("GET /d", (), {})
            assert served is not None
            REQUEST_ID.set("traced")
            metrics.answered("a", "D", "/d", 500, 0.01)
            trace_id = tracing.current_ids()[0]
            served.finish(500)
            return trace_id

        trace_id = contextvars.copy_context().run(serve)
        (taken,) = metrics.errors.take()
        assert taken.trace_id == trace_id and len(trace_id) == 32
        check_recent_errors([taken])
    finally:
        tracing.uninstall()
