"""Load reports from proxies: requests queued per deployment (soft state).

The autoscaler's input (DESIGN.md, flow 4); until it exists, GetStatus
shows the sums. Each proxy's latest report replaces its previous one; a
report older than STALE_S no longer counts (the proxy may be gone).
"""

from __future__ import annotations

from collections.abc import Mapping

from .clock import Clock
from .errors import InvalidArgument
from .goals.spec import check_name

STALE_S = 10.0
MAX_KEYS = 10_000
MAX_QUEUED = 10_000_000


class LoadReports:
    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or Clock()
        self._reports: dict[str, tuple[float, dict[tuple[str, str], int]]] = {}

    def record(self, reporter_id: str, queued: Mapping[str, int]) -> None:
        """Store a proxy's report; InvalidArgument (nothing stored) on a bad one."""
        if not reporter_id or len(reporter_id) > 128:
            raise InvalidArgument("reporter_id", "must be 1-128 characters")
        if len(queued) > MAX_KEYS:
            raise InvalidArgument("queued", f"at most {MAX_KEYS} deployments")
        parsed: dict[tuple[str, str], int] = {}
        for key, count in queued.items():
            app, sep, name = key.partition("/")
            if not sep:
                raise InvalidArgument(f"queued[{key!r}]", "keys are 'application/deployment'")
            check_name(f"queued[{key!r}]", app)
            check_name(f"queued[{key!r}]", name)
            if count > MAX_QUEUED:
                raise InvalidArgument(f"queued[{key!r}]", f"at most {MAX_QUEUED}")
            parsed[(app, name)] = count
        self._reports[reporter_id] = (self._clock.monotonic(), parsed)

    def queued(self, application: str, deployment: str) -> int:
        now = self._clock.monotonic()
        return sum(counts.get((application, deployment), 0)
                   for at, counts in self._reports.values() if now - at < STALE_S)
