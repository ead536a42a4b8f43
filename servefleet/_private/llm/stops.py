"""Stop sequences over streamed text, for any engine that streams pieces.

OpenAI's `stop` ends generation at the first occurrence of any stop string,
and the stop string itself is not returned. Streamed, a stop string may span
pieces ("Amen" arriving as "Am" then "en"), so a piece's text cannot always
be emitted at once: `StopMatcher.feed` holds back the longest tail of the
text so far that could still begin a stop string, and releases it once the
next piece shows it does not (or drops it when it does).

The invariant: everything emitted is free of stop strings and ends before
any occurrence that might still complete, so the concatenated output is
exactly the model's text cut before its first stop string.
"""

from __future__ import annotations

from collections.abc import Iterable


class StopMatcher:
    """Filters one generation's text through its stop strings ("" is ignored)."""

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = tuple(stop for stop in stops if stop)
        self._held = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Takes the next piece of model text; returns what may be emitted now.
        After a stop string is found, `stopped` is True and every later call
        returns ""."""
        if self.stopped:
            return ""
        if not self._stops:
            return text
        buffer = self._held + text
        cut = min((at for at in (buffer.find(s) for s in self._stops) if at >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return buffer[:cut]
        hold = self._partial_stop_length(buffer)
        self._held = buffer[len(buffer) - hold:]
        return buffer[: len(buffer) - hold]

    def flush(self) -> str:
        """At the end of generation, the held-back text (no stop string completed)."""
        held, self._held = self._held, ""
        return held

    def _partial_stop_length(self, buffer: str) -> int:
        """The length of the longest tail of `buffer` that is a proper prefix of
        a stop string."""
        longest = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:length]):
                    longest = length
                    break
        return longest
