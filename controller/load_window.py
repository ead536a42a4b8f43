"""One deployment's load over time, and its aggregate over a look-back window.

The load is a step function: each sample holds from its time until the next
one (a new report changes the total). `aggregate` combines the part of it
within the last `look_back_s`, the way Ray Serve does:

- "mean": the time-weighted mean, from the window's start (or the first
  sample, if later) to now, the last value holding until now;
- "max" / "min": of the values the step function takes in the window.

Samples older than the window go, except the last of them, which is the
value at the window's start. Soft state: rebuilt from reports after a
failover.
"""

from __future__ import annotations

from collections import deque


class LoadWindow:
    def __init__(self) -> None:
        self._samples: deque[tuple[float, float]] = deque()  # (time, total), oldest first

    def add(self, at: float, total: float) -> None:
        if self._samples and at <= self._samples[-1][0]:
            self._samples[-1] = (self._samples[-1][0], total)  # same instant: the newer wins
        else:
            self._samples.append((at, total))

    def latest(self) -> float | None:
        return self._samples[-1][1] if self._samples else None

    def aggregate(self, now: float, look_back_s: float, function: str = "mean") -> float | None:
        """The load over the window ending `now`; None if there is no sample."""
        start = now - look_back_s
        samples = self._samples
        while len(samples) > 1 and samples[1][0] <= start:
            samples.popleft()
        if not samples:
            return None
        if function == "max":
            return max(value for _, value in samples)
        if function == "min":
            return min(value for _, value in samples)
        total, weight = 0.0, 0.0
        for i, (at, value) in enumerate(samples):
            begin = max(at, start)
            end = samples[i + 1][0] if i + 1 < len(samples) else now
            if end > begin:
                total += value * (end - begin)
                weight += end - begin
        return total / weight if weight > 0 else samples[-1][1]
