"""`servefleet logs --request-id`: which of a replica's log lines are one
request's (controller/api/request_lines.py); the end-to-end runs are in
test_tracing_e2e.py (JSON lines) and test_logs_command.py (text records
with their tracebacks)."""

from __future__ import annotations

import json
import logging
import sys

from servefleet._private.observability.logs import TEXT
from servefleet.controller.api.request_lines import RequestLines


def one_line(line: str, request_id: str = "req-7") -> bool:
    return RequestLines(request_id).take([line]) == [line]


def test_json_lines_match_by_their_request_id_field_text_lines_by_the_id() -> None:
    assert one_line(json.dumps({"message": "front got x", "request_id": "req-7"}))
    assert not one_line(json.dumps({"message": "front got x", "request_id": "req-70"}))
    # The id only in the message of another request's line is not that request's.
    assert not one_line(json.dumps({"message": "saw req-7", "request_id": "other"}))
    assert not one_line(json.dumps({"message": "no request"}))
    assert one_line("INFO request req-7 timed out")  # text format, and a user's print
    assert not one_line("INFO something else")
    assert one_line('{"cut short": "req-7"')  # a line that only looks like JSON


def text_record(message: str, failing: bool = False) -> list[str]:
    """A record as a replica's text-format logging writes it."""
    exc_info = None
    if failing:
        try:
            raise ValueError("bad input {'x': 1}\nsecond line of the message")
        except ValueError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("servefleet.replica.http", logging.ERROR, __file__, 1,
                               message, None, exc_info)
    return logging.Formatter(TEXT).format(record).splitlines()


def test_a_text_record_naming_the_request_comes_with_its_traceback() -> None:
    failed = text_record("request req-7 failed in user code", failing=True)
    assert len(failed) > 4 and failed[1].startswith("Traceback")
    output = [*text_record("request other failed in user code", failing=True),
              "a user's print", *failed,
              *text_record("request req-8 answered"), "another print",
              json.dumps({"message": "x", "request_id": "req-7"})]
    lines = RequestLines("req-7")
    assert lines.take(output) == [*failed, output[-1]]


def test_a_traceback_read_in_two_pieces_stays_the_requests() -> None:
    failed = text_record("request req-7 failed in user code", failing=True)
    lines = RequestLines("req-7")
    assert lines.take(failed[:2]) == failed[:2]
    assert lines.take([*failed[2:], *text_record("request other answered")]) == failed[2:]
    # A JSON record ends the text one: what follows it is not the request's.
    assert lines.take(failed[:1]) == failed[:1]
    assert lines.take([json.dumps({"message": "other", "request_id": "x"}),
                       "a print after it"]) == []
