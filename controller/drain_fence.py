"""Holding a replica's drain until the proxies and handles routing to it let go.

A replica leaves the published replica set before the leader asks it to
drain; the replica then serves one graceful_shutdown_wait_loop_s before it
refuses new requests. A reporter whose update lags longer (a proxy driving
HAProxy over its runtime API while starved of CPU, say) would send to a
replica that refuses, and with no other replica to retry on, fail the
request. So reporters name, in their load reports, the replica-set
snapshot they route by per deployment (`AppliedReplicaSets`: all of them
in a stream's first report, then what changed); this module keeps the
latest, indexed by deployment, and the replica ids of the replica-set
snapshots the leader published lately, and `wait` holds a drain until no
reporter routes by a set that holds the replica, or a bound runs out.

A reporter counts while it has a Watch stream open to this leader: one
without hears of no change, so waiting for it is no use (and a killed
proxy would hold every drain). What it named is kept for STALE_S after
its last report, for a stream that comes back. An xDS client
(xds/applied.py) counts while its xDS stream is open, and names the sets
of the EDS response it last acknowledged and of those sent since. A
reporter that comes to name a set holding a replica whose drain already
waits (a stream resumed meanwhile) holds that drain too. A snapshot id this leader
has not published lately (a set from the last term, say) may hold the
replica: the drain waits, up to its bound, for a newer one. A reporter
that never names what it routes by (a client in another language, say)
is not waited for; the replica's own wait loop is what covers it.

Cost: a report touches the deployments it names and the drains waiting
on that reporter; a waiting drain looks at its own holders only, and at
the open Watch streams every PRUNE_S. An xDS stream reports only when
what its client may route by changes (each publish of a deployment it
holds renames that deployment's current set, so about once per publish).
"""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from servefleet.v1 import controller_pb2 as api

from .clock import Clock
from .errors import InvalidArgument
from .load_reports import ReportKeys

logger = logging.getLogger(__name__)
STALE_S = 10.0
# A drain waits at most this long (or the deployment's graceful timeout, if shorter).
MAX_WAIT_S = 10.0
POLL_S = 0.02
# How often a waiting drain drops the holders whose Watch stream closed.
PRUNE_S = 0.25
# Replica-set snapshots remembered per deployment: reporters apply each
# within moments, so only the latest few matter.
HISTORY = 32
MAX_KEYS = 10_000
MAX_SNAPSHOT_ID = 64
Key = tuple[str, str]
# What a reporter routes by in one deployment: a snapshot id, or several it
# may be using at once (an xDS client between responses); "" or () for none.
Routed = str | tuple[str, ...]


@dataclass(eq=False)
class _Waiter:
    key: Key
    replica_id: str
    holders: set[str] = field(default_factory=set)


class DrainFence:
    def __init__(self, clock: Clock | None = None,
                 watchers: Callable[[], Iterable[str]] | None = None) -> None:
        self._clock = clock or Clock()
        # The watcher ids with a Watch stream open to this leader.
        self._watchers = watchers or (lambda: ())
        # deployment -> {reporter: the snapshot id(s) it routes by}
        self._routes: dict[Key, dict[str, Routed]] = {}
        # reporter -> when it last reported (only those that named a set)
        self._seen: dict[str, float] = {}
        # deployment -> {snapshot id: its replica ids}, oldest first
        self._sets: dict[Key, OrderedDict[str, frozenset[str]]] = {}
        self._key = ReportKeys()
        # Reporters whose own stream is their presence (xDS clients: xds/applied.py).
        self._streams: set[str] = set()
        self._waiters: set[_Waiter] = set()
        self._swept_at = self._clock.monotonic()

    # -- what the leader published ---------------------------------------------------

    def published(self, key: Key, snapshot_id: str, replica_ids: Iterable[str]) -> None:
        """The leader published this replica set for `key`."""
        sets = self._sets.setdefault(key, OrderedDict())
        if snapshot_id not in sets:
            sets[snapshot_id] = frozenset(replica_ids)
            while len(sets) > HISTORY:
                sets.popitem(last=False)
        sets.move_to_end(snapshot_id)
        self._recheck(key)

    def removed(self, key: Key) -> None:
        """The deployment is gone: reporters drop its set."""
        self._sets.pop(key, None)

    # -- what reporters route by ------------------------------------------------------

    def check(self, applied: api.AppliedReplicaSets) -> dict[Key, str]:
        """A report's `applied.snapshot_ids`, parsed (an empty id: no longer
        routed); InvalidArgument naming the entry when bad."""
        if len(applied.snapshot_ids) > MAX_KEYS:
            raise InvalidArgument("applied.snapshot_ids", f"at most {MAX_KEYS} deployments")
        out = {}
        for text, snapshot_id in applied.snapshot_ids.items():
            key = self._key("applied.snapshot_ids", text)
            if len(snapshot_id) > MAX_SNAPSHOT_ID:
                raise InvalidArgument(f"applied.snapshot_ids[{text!r}]", "a snapshot id of at "
                                      f"most {MAX_SNAPSHOT_ID} characters")
            out[key] = snapshot_id
        return out

    def reported(self, reporter_id: str, applied: Mapping[Key, Routed] | None,
                 replace: bool = False, stream: bool = False) -> None:
        """A report came from `reporter_id`; `applied`: the sets it names
        (checked), None when it named none; `replace`: they are all its sets;
        `stream`: from the reporter's own stream (stream_opened), which a load
        report naming the same id does not overwrite."""
        self._sweep()
        if applied is None and reporter_id not in self._seen:
            return  # it never names what it routes by: not waited for
        if reporter_id in self._streams and not stream:
            return
        self._seen[reporter_id] = self._clock.monotonic()
        if replace:
            self._drop(reporter_id)
        for key, snapshot_id in (applied or {}).items():
            if snapshot_id:
                # Interned: one string per id, not one more per reporter.
                self._routes.setdefault(key, {})[reporter_id] = (
                    sys.intern(snapshot_id) if isinstance(snapshot_id, str)
                    else tuple(sys.intern(s) for s in snapshot_id))
            elif key in self._routes:
                self._routes[key].pop(reporter_id, None)
        named = applied or {}
        for waiter in self._waiters:
            if reporter_id in waiter.holders:
                if not self._holds(reporter_id, waiter.key, waiter.replica_id):
                    waiter.holders.discard(reporter_id)
            elif waiter.key in named and self._holds(reporter_id, waiter.key,
                                                     waiter.replica_id):
                # It holds the replica now (a stream that came back); a waiting
                # drain's prune drops it if it has no stream open.
                waiter.holders.add(reporter_id)

    def stream_opened(self, reporter_id: str) -> None:
        """A reporter that is present while its stream is open (an xDS client)."""
        self._streams.add(reporter_id)

    def stream_closed(self, reporter_id: str) -> None:
        """Its stream ended: it routes by nothing this leader publishes now."""
        self._streams.discard(reporter_id)
        self._seen.pop(reporter_id, None)
        self._drop(reporter_id)
        for waiter in self._waiters:
            waiter.holders.discard(reporter_id)

    def holding(self, key: Key, replica_id: str) -> list[str]:
        """The reporters with a Watch (or xDS) stream open that may route to
        `replica_id` of `key` now."""
        present = self._present()
        return sorted(r for r in self._routes.get(key, {})
                      if present(r) and self._holds(r, key, replica_id))

    async def wait(self, key: Key, replica_id: str, limit_s: float) -> list[str]:
        """Wait until no reporter may route to the replica, at most `limit_s`;
        the reporters that still may (empty when none)."""
        started = self._clock.monotonic()
        deadline = started + min(limit_s, MAX_WAIT_S)
        waiter = _Waiter(key, replica_id, set(self.holding(key, replica_id)))
        self._waiters.add(waiter)
        pruned = started
        try:
            while waiter.holders and (now := self._clock.monotonic()) < deadline:
                await self._clock.sleep(POLL_S)
                if now - pruned >= PRUNE_S:
                    pruned = now
                    present = self._present()
                    waiter.holders = {r for r in waiter.holders if present(r)}
        finally:
            self._waiters.discard(waiter)
        holders, waited = sorted(waiter.holders), self._clock.monotonic() - started
        if holders:
            logger.warning("replica %s of %s/%s drains though %d reporters may still route "
                           "to it after %.1f s (%s)", replica_id, *key, len(holders), waited,
                           ", ".join(holders[:3]))
        elif waited >= 1.0:
            logger.info("replica %s of %s/%s: reporters let go of it after %.1f s",
                        replica_id, *key, waited)
        return holders

    # -- inside --------------------------------------------------------------------------

    def _present(self) -> Callable[[str], bool]:
        """Whether a reporter has its stream open now."""
        watchers = set(self._watchers())
        return lambda r: r in self._streams or r in watchers

    def _holds(self, reporter_id: str, key: Key, replica_id: str) -> bool:
        routed = self._routes.get(key, {}).get(reporter_id)
        if routed is None:
            return False  # it routes nowhere in this deployment
        sets = self._sets.get(key)
        for snapshot_id in (routed,) if isinstance(routed, str) else routed:
            replicas = sets.get(snapshot_id) if sets is not None else None
            if replicas is None or replica_id in replicas:
                return True
        return False

    def _recheck(self, key: Key) -> None:
        """A set was published: an id that was unknown may be known now."""
        for waiter in self._waiters:
            if waiter.key == key:
                waiter.holders = {r for r in waiter.holders
                                  if self._holds(r, key, waiter.replica_id)}

    def _drop(self, reporter_id: str) -> None:
        for key in [k for k, routes in self._routes.items() if routes.pop(reporter_id, None)
                    is not None and not routes]:
            del self._routes[key]

    def _sweep(self) -> None:
        """Forget reporters with no Watch stream and no report for STALE_S
        (at most once a second)."""
        now = self._clock.monotonic()
        if now - self._swept_at < 1.0:
            return
        self._swept_at = now
        stale = [r for r, at in self._seen.items() if now - at >= STALE_S]
        if stale:
            present = self._present()
            for reporter_id in stale:
                if not present(reporter_id):
                    del self._seen[reporter_id]
                    self._drop(reporter_id)
