"""Which lines of a replica's output are one request's (`servefleet logs --request-id`).

- A JSON line (`--log-format json`) is a whole record: the request's when
  its `request_id` field is the id. A traceback is inside it (`error`).
- A text record (servefleet._private.observability.logs.TEXT) starts with its time,
  `2026-12-03 10:31:02,114 ERROR ...`, and runs until the next record
  starts: `logger.exception` writes the traceback on the lines after the
  message, and those lines do not name the request. So a text record that
  names the id is taken whole, up to the next record's first line.
- Any other line (a user's print) is the request's when it names the id.

Output is read in pieces (a followed stream reads again every poll), so one
`RequestLines` reads one replica's output and remembers whether its last
line was inside one of the request's records.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

# The start of a text record: logging's default asctime, then a space.
TEXT_RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


class RequestLines:
    def __init__(self, request_id: str) -> None:
        self._id = request_id
        self._quoted = json.dumps(request_id)
        self._inside = False  # the last line read belongs to one of its text records

    def take(self, lines: Iterable[str]) -> list[str]:
        """The request's lines among `lines`, which follow those read before."""
        return [line for line in lines if self._belongs(line)]

    def _belongs(self, line: str) -> bool:
        if TEXT_RECORD.match(line):
            self._inside = self._id in line
            return self._inside
        if line.startswith("{"):
            if not self._inside and self._quoted not in line:
                return False  # most JSON lines: never parsed
            entry = _json_object(line)
            if entry is not None:
                self._inside = False
                return entry.get("request_id") == self._id
        # A line of the record being read (a traceback's), or a user's print.
        return self._inside or self._id in line


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None  # cut short, or text that only starts like JSON
    return entry if isinstance(entry, dict) else None
