"""`servefleet logs -f`: keep following across the ends of GetLogs streams.

A follow stream ends DEADLINE_EXCEEDED an hour after it began (the
controller's bound, controller/api/log_bounds.py), and UNAVAILABLE or
CANCELLED when its leader stops. The command promises "until Ctrl-C", so it
opens the next stream itself, asking each replica's last `overlap` lines
again: lines up to the last one it printed of a replica are dropped, so
nothing is printed twice. When that line is not among them (more than
`overlap` lines came meanwhile), all are printed after a note that some may
be missing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import grpc

# The ends of a follow stream that the next one picks up after.
RESUMABLE = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE,
                       grpc.StatusCode.CANCELLED})
RETRY_S = 1.0
# Past lines asked again per replica on a new stream (GetLogs' tail_lines).
OVERLAP = 200


class Chunk(Protocol):
    @property
    def replica_id(self) -> str: ...

    @property
    def lines(self) -> Iterable[str]: ...


class _Resume:
    """Per replica: the last line printed, and whether a new stream's first
    chunk of it still has to be matched against it."""

    def __init__(self) -> None:
        self.last: dict[str, str] = {}
        self.matching: set[str] = set()

    def new_stream(self) -> None:
        self.matching = set(self.last)

    def fresh(self, replica_id: str, lines: list[str], note: Callable[[str], None]) -> list[str]:
        """The lines of this chunk not printed before."""
        if replica_id in self.matching:
            self.matching.discard(replica_id)
            last = self.last[replica_id]
            if last in lines:
                lines = lines[len(lines) - lines[::-1].index(last):]
            else:
                note(f"{replica_id}: some lines may be missing (more than {OVERLAP} came "
                     "while the log stream was reopened)")
        if lines:
            self.last[replica_id] = lines[-1]
        return lines


def follow(open_stream: Callable[[int], Iterator[Chunk]], tail: int,
           emit: Callable[[str, str], None], code_of: Callable[[BaseException], Any],
           note: Callable[[str], None] = lambda text: print(text, file=sys.stderr),
           sleep: Callable[[float], None] = time.sleep) -> None:
    """Print (emit(replica_id, line)) the last `tail` lines, then new ones
    until interrupted: open_stream(tail_lines) opens one GetLogs follow stream;
    code_of(error) is the gRPC status of an error it raised (None: not a stream
    end to pick up after, raised again)."""
    resume = _Resume()
    lines_asked = tail
    broken = False  # the last stream ended other than by the hour's bound
    while True:
        resume.new_stream()
        try:
            for chunk in open_stream(lines_asked):
                broken = False
                for line in resume.fresh(chunk.replica_id, list(chunk.lines), note):
                    emit(chunk.replica_id, line)
        except Exception as e:
            code = code_of(e)
            if code not in RESUMABLE:
                raise
            if code != grpc.StatusCode.DEADLINE_EXCEEDED and not broken:
                note(f"log stream ended ({code.name}: {e}); reopening it")
                broken = True
        sleep(RETRY_S)
        lines_asked = OVERLAP
