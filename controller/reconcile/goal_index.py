"""The deployment goals a reconcile pass works toward, indexed by deployment.

Refreshed at the start of a pass from the deployment table once it changed
(`changed`, told by the table's change hook) and on every full pass. The planner's
`Goal` for a deployment is derived from its record only when the record
object changes (a deploy swaps in a new one), so a pass over 1,000 unchanged
deployments derives nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from servefleet.v1 import records_pb2

from .planner import Goal, goal_of

DKey = tuple[str, str]


class GoalIndex:
    def __init__(self, source: Callable[[], list[records_pb2.DeploymentRecord]]) -> None:
        self._source = source
        self._records: dict[DKey, records_pb2.DeploymentRecord] = {}
        self._goals: dict[DKey, tuple[records_pb2.DeploymentRecord, Goal]] = {}
        self._stale = True

    def changed(self) -> None:
        """A record of the table changed: the next refresh reads it again."""
        self._stale = True

    def refresh(self, tracked: Iterable[DKey], *, force: bool = False) -> set[DKey]:
        """Take in the table's records, if it changed since (or `force`): live
        ones, and deleted ones whose replicas (`tracked`) are still being
        stopped. Returns the keys whose record is new, another or gone."""
        if not (self._stale or force):
            return set()
        self._stale = False
        tracked = set(tracked)
        before = self._records
        self._records = {(r.spec.application, r.spec.name): r for r in self._source()
                         if not r.deleted or (r.spec.application, r.spec.name) in tracked}
        return ({k for k, r in self._records.items() if before.get(k) is not r}
                | (before.keys() - self._records.keys()))

    def keys(self) -> set[DKey]:
        return set(self._records)

    def record(self, key: DKey) -> records_pb2.DeploymentRecord | None:
        return self._records.get(key)

    def goal(self, key: DKey) -> Goal | None:
        """The goal of `key`'s current record, or None when it has none."""
        record = self._records.get(key)
        if record is None:
            return None
        cached = self._goals.get(key)
        if cached is None or cached[0] is not record:
            cached = (record, goal_of(record))
            self._goals[key] = cached
        return cached[1]

    def last_goal(self, key: DKey) -> Goal | None:
        """The goal last derived for `key`, even if its record has since gone."""
        cached = self._goals.get(key)
        return cached[1] if cached is not None else None

    def forget(self, key: DKey) -> None:
        """`key` is gone (deleted, its replicas stopped)."""
        self._goals.pop(key, None)
        record = self._records.get(key)
        if record is not None and record.deleted:
            del self._records[key]
