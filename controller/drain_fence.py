"""Holding a replica's drain until the proxies and handles routing to it let go.

A replica leaves the published replica set before the leader asks it to
drain; the replica then serves one graceful_shutdown_wait_loop_s before it
refuses new requests. A reporter whose update lags longer (a proxy driving
HAProxy over its runtime API while starved of CPU, say) would send to a
replica that refuses, and with no other replica to retry on, fail the
request. So reporters name, in their load reports, the replica-set
snapshot they have applied per deployment (`AppliedReplicaSets`); this
module keeps the latest of each, and the ids of the replicas in each
replica-set snapshot the leader published lately, and `wait` holds a drain
until no reporter routes by a set that holds the replica, or a bound runs
out.

A reporter counts while it has a Watch stream open to this leader: one
without hears of no change, so waiting for it is no use (and a killed
proxy would hold every drain). What it last named is kept for STALE_S
after its last report, for a stream that comes back. A snapshot id this
leader has not published lately (a set from the last term, say) may hold
the replica: the drain waits, up to its bound, for a newer one. A reporter
that never names what it applied (a client in another language, say) is
not waited for; the replica's own wait loop is what covers it.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping

from .clock import Clock
from .errors import InvalidArgument
from .goals.spec import check_name

logger = logging.getLogger(__name__)
STALE_S = 10.0
# A drain waits at most this long (or the deployment's graceful timeout, if shorter).
MAX_WAIT_S = 10.0
POLL_S = 0.02
# Replica-set snapshots remembered per deployment: reporters apply each
# within moments, so only the latest few matter.
HISTORY = 32
MAX_KEYS = 10_000
MAX_SNAPSHOT_ID = 64
Key = tuple[str, str]


class DrainFence:
    def __init__(self, clock: Clock | None = None,
                 watchers: Callable[[], Iterable[str]] | None = None) -> None:
        self._clock = clock or Clock()
        # The watcher ids with a Watch stream open to this leader.
        self._watchers = watchers or (lambda: ())
        # reporter -> (when it last reported, {deployment: snapshot id applied})
        self._applied: dict[str, tuple[float, dict[Key, str]]] = {}
        # deployment -> {snapshot id: its replica ids}, oldest first
        self._sets: dict[Key, OrderedDict[str, frozenset[str]]] = {}

    def published(self, key: Key, snapshot_id: str, replica_ids: Iterable[str]) -> None:
        """The leader published this replica set for `key`."""
        sets = self._sets.setdefault(key, OrderedDict())
        sets[snapshot_id] = frozenset(replica_ids)
        sets.move_to_end(snapshot_id)
        while len(sets) > HISTORY:
            sets.popitem(last=False)

    def removed(self, key: Key) -> None:
        """The deployment is gone: reporters drop its set."""
        self._sets.pop(key, None)

    def check(self, applied: Mapping[str, str]) -> dict[Key, str]:
        """A report's `applied.snapshot_ids`, parsed; InvalidArgument naming
        the entry when bad."""
        if len(applied) > MAX_KEYS:
            raise InvalidArgument("applied.snapshot_ids", f"at most {MAX_KEYS} deployments")
        out = {}
        for text, snapshot_id in applied.items():
            field = f"applied.snapshot_ids[{text!r}]"
            app, sep, name = text.partition("/")
            if not sep:
                raise InvalidArgument(field, "keys are 'application/deployment'")
            check_name(field, app)
            check_name(field, name)
            if not 0 < len(snapshot_id) <= MAX_SNAPSHOT_ID:
                raise InvalidArgument(field, f"a snapshot id of 1-{MAX_SNAPSHOT_ID} characters")
            out[(app, name)] = snapshot_id
        return out

    def reported(self, reporter_id: str, applied: dict[Key, str] | None) -> None:
        """A report came from `reporter_id`; `applied`: what it names (checked),
        None when the report left it out (unchanged)."""
        now = self._clock.monotonic()
        if applied is not None:
            self._applied[reporter_id] = (now, applied)
        elif reporter_id in self._applied:
            self._applied[reporter_id] = (now, self._applied[reporter_id][1])

    def holding(self, key: Key, replica_id: str) -> list[str]:
        """The reporters that may route to `replica_id` of `key` now."""
        now = self._clock.monotonic()
        watching = set(self._watchers())
        sets: Mapping[str, frozenset[str]] = self._sets.get(key, {})
        holders = []
        for reporter_id, (at, applied) in list(self._applied.items()):
            if reporter_id not in watching:
                if now - at >= STALE_S:
                    del self._applied[reporter_id]  # gone: forgotten
                continue
            snapshot_id = applied.get(key)
            if snapshot_id is None:
                continue  # it routes nowhere in this deployment
            replicas = sets.get(snapshot_id)
            if replicas is None or replica_id in replicas:
                holders.append(reporter_id)
        return sorted(holders)

    async def wait(self, key: Key, replica_id: str, limit_s: float) -> list[str]:
        """Wait until no reporter may route to the replica, at most `limit_s`;
        the reporters that still may (empty when none)."""
        deadline = self._clock.monotonic() + min(limit_s, MAX_WAIT_S)
        started = self._clock.monotonic()
        while (holders := self.holding(key, replica_id)) and self._clock.monotonic() < deadline:
            await self._clock.sleep(POLL_S)
        waited = self._clock.monotonic() - started
        if holders:
            logger.warning("replica %s of %s/%s drains though %d reporters may still route "
                           "to it after %.1f s (%s)", replica_id, *key, len(holders), waited,
                           ", ".join(holders[:3]))
        elif waited >= 1.0:
            logger.info("replica %s of %s/%s: reporters let go of it after %.1f s",
                        replica_id, *key, waited)
        return holders
