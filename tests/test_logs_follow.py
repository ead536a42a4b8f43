"""`servefleet logs -f` keeps following past the end of a GetLogs stream (the
controller's hourly bound, a change of leader), printing nothing twice
(servefleet/_private/cli/follow.py; fake streams, no clock)."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc
import pytest

from servefleet._private.cli.follow import OVERLAP, follow


@dataclass
class Chunk:
    replica_id: str
    lines: list[str] = field(default_factory=list)


class Ended(Exception):
    def __init__(self, code: grpc.StatusCode) -> None:
        super().__init__(code.name)
        self.code = code


class Streams:
    """Each open gives the next scripted stream: its chunks, then its end."""

    def __init__(self, *scripts: tuple[list[Chunk], Exception]) -> None:
        self.scripts = list(scripts)
        self.asked: list[int] = []

    def __call__(self, tail: int):
        self.asked.append(tail)
        if not self.scripts:
            raise KeyboardInterrupt  # the user's Ctrl-C ends the test
        chunks, end = self.scripts.pop(0)
        yield from chunks
        raise end


def run(streams: Streams, tail: int = 5) -> tuple[list[str], list[str]]:
    printed: list[str] = []
    notes: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        follow(streams, tail, lambda r, line: printed.append(f"{r} {line}"),
               lambda e: getattr(e, "code", None), notes.append, lambda s: None)
    return printed, notes


def test_the_hourly_end_is_picked_up_after_without_repeating_a_line() -> None:
    streams = Streams(
        ([Chunk("a", ["1", "2"]), Chunk("b", ["x"]), Chunk("a", ["3"])],
         Ended(grpc.StatusCode.DEADLINE_EXCEEDED)),
        # The next stream's tail repeats what was printed, then goes on.
        ([Chunk("a", ["1", "2", "3", "4"]), Chunk("b", ["x", "y"]), Chunk("c", ["new"])],
         Ended(grpc.StatusCode.DEADLINE_EXCEEDED)))
    printed, notes = run(streams)
    assert printed == ["a 1", "a 2", "b x", "a 3", "a 4", "b y", "c new"]
    assert streams.asked == [5, OVERLAP, OVERLAP] and notes == []


def test_a_repeated_line_is_matched_at_its_last_place() -> None:
    streams = Streams(([Chunk("a", ["same", "same"])], Ended(grpc.StatusCode.DEADLINE_EXCEEDED)),
                      ([Chunk("a", ["same", "same", "same"])],
                       Ended(grpc.StatusCode.DEADLINE_EXCEEDED)))
    printed, _ = run(streams)
    assert printed == ["a same", "a same"]  # not knowable as new: none printed again


def test_a_gap_longer_than_the_overlap_is_said() -> None:
    streams = Streams(([Chunk("a", ["1"])], Ended(grpc.StatusCode.UNAVAILABLE)),
                      ([Chunk("a", ["7", "8"])], Ended(grpc.StatusCode.CANCELLED)))
    printed, notes = run(streams)
    assert printed == ["a 1", "a 7", "a 8"]
    assert notes[0].startswith("log stream ended (UNAVAILABLE")
    assert "a: some lines may be missing" in notes[1]
    assert notes[2].startswith("log stream ended (CANCELLED")


def test_other_ends_are_errors_for_the_user() -> None:
    streams = Streams(([Chunk("a", ["1"])], Ended(grpc.StatusCode.NOT_FOUND)))
    with pytest.raises(Ended):
        follow(streams, 5, lambda r, line: None, lambda e: getattr(e, "code", None),
               lambda text: None, lambda s: None)
