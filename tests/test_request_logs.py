"""`servefleet logs --request-id`: which of a replica's log lines are one
request's (controller/api/logs.py); the end-to-end run is in
test_tracing_e2e.py."""

from __future__ import annotations

import json

from servefleet.controller.api.logs import _lines_of


def test_json_lines_match_by_their_request_id_field_text_lines_by_the_id() -> None:
    match = _lines_of("req-7")
    assert match(json.dumps({"message": "front got x", "request_id": "req-7"}))
    assert not match(json.dumps({"message": "front got x", "request_id": "req-70"}))
    # The id only in the message of another request's line is not that request's.
    assert not match(json.dumps({"message": "saw req-7", "request_id": "other"}))
    assert not match(json.dumps({"message": "no request"}))
    assert match("INFO request req-7 timed out")  # text format, and a user's print
    assert not match("INFO something else")
    assert match('{"cut short": "req-7"')  # a line that only looks like JSON
