"""What one GetLogs call may take of the controller, and the bookkeeping of it.

Replicas print what they like, and a follow stream lasts as long as its
client keeps it open, so each call is bounded (`LogBounds`), tail and follow
alike:

- a line longer than `max_line_bytes` is cut there, the rest replaced by a
  note of how many bytes were cut (`... [N bytes cut]`);
- lines go out in messages of at most `max_message_bytes`, under the 4 MiB
  that gRPC clients take by default (one 5 MB line was a message no client
  could read);
- once the call has sent `max_call_bytes` of lines, it ends
  RESOURCE_EXHAUSTED, saying how to ask for less;
- a follow ends DEADLINE_EXCEEDED `max_follow_s` after it began, whatever
  its handler is doing: polling, or suspended in a write its client does
  not read (ended from a timer, stream_end.cut_off). The bound is on the
  whole call rather than on idleness, since a client that stopped reading
  is not idle to the server (kubelet ends streaming connections after 4 h
  idle; a client that wants more calls again).

`LogBudget` cuts and packs one replica's lines, counting what the call sent;
`end_follow_after` arms the follow's timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import grpc

from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import replica_pb2

from ..errors import ApiError
from ..stream_end import cut_off


@dataclass(frozen=True)
class LogBounds:
    """The bounds of one GetLogs call (module docstring); the defaults are the API's."""

    # Longer lines are cut here. Docker's and CRI's log drivers split lines
    # at 16 KiB; a JSON log record with a traceback can pass that, rarely 64 KiB.
    max_line_bytes: int = 64 * 1024
    # Lines are packed into messages of at most this many bytes (a line's
    # text; the message's framing adds a few bytes per line).
    max_message_bytes: int = 1024 * 1024
    # The call ends RESOURCE_EXHAUSTED once it has sent this many bytes of lines.
    max_call_bytes: int = 64 * 1024 * 1024
    # A follow ends DEADLINE_EXCEEDED this long after the call began.
    max_follow_s: float = 3600.0


# GetLogs' own (the API reference names them).
GET_LOGS = LogBounds()


class TooMuchOutput(ApiError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


def cut_line(line: str, limit: int) -> tuple[str, int]:
    """`line` with what passes `limit` bytes (UTF-8) cut and noted, and its size sent."""
    if len(line) * 4 <= limit:  # no character takes more than 4 bytes
        return line, len(line.encode(errors="replace"))
    raw = line.encode(errors="replace")
    if len(raw) <= limit:
        return line, len(raw)
    # "ignore" drops a character split at the limit rather than half of it.
    kept = raw[:limit].decode(errors="ignore")
    length = len(kept.encode())
    note = f"... [{len(raw) - length} bytes cut]"
    return kept + note, length + len(note)


class LogBudget:
    def __init__(self, bounds: LogBounds) -> None:
        self._bounds = bounds
        self.sent = 0  # bytes of lines sent so far

    def messages(self, record: replica_pb2.ReplicaRecord, lines: list[str]
                 ) -> Iterator[api.GetLogsResponse]:
        """`lines` of the replica `record` names, cut and packed into messages;
        TooMuchOutput once the call's bytes are spent (after the lines that fit)."""
        bounds = self._bounds
        batch: list[str] = []
        size = 0
        for line in lines:
            text, length = cut_line(line, bounds.max_line_bytes)
            if self.sent + length > bounds.max_call_bytes:
                if batch:
                    yield _message(record, batch)
                raise TooMuchOutput(
                    f"GetLogs sends at most {bounds.max_call_bytes} bytes of lines per call "
                    f"and has sent {self.sent}; ask for fewer (tail_lines, one deployment or "
                    "replica, request_id) or call again")
            if batch and size + length > bounds.max_message_bytes:
                yield _message(record, batch)
                batch, size = [], 0
            batch.append(text)
            size += length
            self.sent += length
        if batch:
            yield _message(record, batch)



def end_follow_after(bounds: LogBounds, context: grpc.aio.ServicerContext
                     ) -> asyncio.TimerHandle:
    """End the calling handler's follow (its task) DEADLINE_EXCEEDED once it has
    lasted `bounds.max_follow_s`; cancel the handle when the call ends first."""
    handler = asyncio.current_task()
    assert handler is not None
    return asyncio.get_running_loop().call_later(
        bounds.max_follow_s, cut_off, handler, context, grpc.StatusCode.DEADLINE_EXCEEDED,
        f"GetLogs follows for at most {bounds.max_follow_s:g} s per call; call again to go on")


def _message(record: replica_pb2.ReplicaRecord, lines: list[str]) -> api.GetLogsResponse:
    return api.GetLogsResponse(replica_id=record.replica_id, application=record.application,
                               deployment=record.deployment, lines=lines)
