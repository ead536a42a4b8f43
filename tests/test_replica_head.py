"""The replica's one pass over a request's headers (replica/head.py)."""

from __future__ import annotations

from typing import Any

import pytest

from servefleet.replica.head import Head


def test_every_field_is_read_in_one_pass() -> None:
    head = Head([(b"host", b"x"), (b"x-request-id", b""), (b"x-request-id", b"rid-1"),
                 (b"traceparent", b"00-a-b-01"), (b"tracestate", b"k=v"),
                 (b"x-servefleet-method", b"first"), (b"x-servefleet-method", b"second"),
                 (b"serve_multiplexed_model_id", b"m1"), (b"x-servefleet-route-prefix", b"/api"),
                 (b"x-servefleet-stream", b"1"), (b"x-servefleet-check", b"1"),
                 (b"content-length", b"0"), (b"transfer-encoding", b"chunked")])
    assert (head.request_id, head.method, head.model_id, head.route_prefix) == \
        ("rid-1", "first", "m1", "/api")
    assert head.trace == ((b"traceparent", b"00-a-b-01"), (b"tracestate", b"k=v"))
    assert head.stream and head.check
    assert head.has_body is False  # the first of length and chunked decides


@pytest.mark.parametrize(("headers", "has_body"), [
    ([], None), ([(b"content-length", b"12")], True), ([(b"content-length", b" 0 ")], False),
    ([(b"content-length", b"")], False), ([(b"transfer-encoding", b"chunked")], True)])
def test_whether_a_body_follows(headers: list[tuple[bytes, bytes]], has_body: Any) -> None:
    assert Head(headers).has_body is has_body


def test_an_id_is_made_for_a_request_without_one_and_added_to_the_scope() -> None:
    scope: dict[str, Any] = {"headers": [(b"host", b"x")]}
    head = Head(scope["headers"])
    made = head.made_id(scope)
    assert len(made) == 32 and scope["headers"][-1] == (b"x-request-id", made.encode())
    assert head.made_id(scope) == made and len(scope["headers"]) == 2
    kept: dict[str, Any] = {"headers": [(b"x-request-id", b"mine")]}
    assert Head(kept["headers"]).made_id(kept) == "mine" and len(kept["headers"]) == 1
