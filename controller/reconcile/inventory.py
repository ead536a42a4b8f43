"""The registry against what the runtime runs: recovery, liveness, orphans, pruning.

- `recover` (a new leader term): registry records are matched with the
  runtime's replicas. Matches are tracked as RECOVERING (adopted without a
  restart once they answer as ready) or, if a stop was under way, STOPPING;
  records whose replica is gone are dropped; replicas without a record are
  orphans and are stopped.
- `sweep` (every LIVENESS_SWEEP_S): one runtime listing. A tracked replica
  that is gone is reported as `Exited` with the runtime's reason; a replica
  no record names is an orphan (say, one an old leader launched after losing
  its lease) and is stopped once seen on two sweeps ORPHAN_GRACE_S apart, so
  a start under way is never taken for one. Every PRUNE_EVERY_S the runtime
  removes what dead replicas left behind (exited containers).

Runtime calls are bounded by LIST_TIMEOUT_S: a slow engine must not hold up
a pass; the next sweep tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping

from servefleet.v1 import replica_pb2

from ..clock import Clock
from ..keys import ClusterKeys
from ..runtime import RuntimeReplica
from ..store import Store
from .loop import ReconcileLoop
from .planner import STOPPING, ReplicaView
from .replica_ops import ReplicaOps
from .transitions import Observation

logger = logging.getLogger(__name__)

LIVENESS_SWEEP_S = 0.5
ORPHAN_GRACE_S = 5.0
LIST_TIMEOUT_S = 5.0
PRUNE_EVERY_S = 30.0

Post = Callable[[str, Observation], None]


class Inventory:
    def __init__(self, keys: ClusterKeys, ops: ReplicaOps, loop: ReconcileLoop, clock: Clock,
                 post: Post) -> None:
        self._keys = keys
        self._ops = ops
        self._loop = loop
        self._clock = clock
        # Hands an observation to the reconciler, for its next pass.
        self._post = post
        # Replicas the runtime runs that no record names, by when first seen.
        self._orphans: dict[str, float] = {}
        self._next_sweep = 0.0
        self._last_prune = 0.0

    async def recover(self, store: Store) -> list[replica_pb2.ReplicaRecord]:
        """The registry's records of replicas still running (stopping ones marked so)."""
        records = []
        for kv in await store.list_prefix(self._keys.replicas):
            try:
                records.append(replica_pb2.ReplicaRecord.FromString(kv.value))
            except Exception as e:  # never a poison pill (goals/stored.py): skipped
                logger.error("the stored replica record at %s cannot be used (%s); "
                             "skipping it", kv.key, type(e).__name__)
        running = {r.replica_id: r for r in await self._ops.runtime.list(self._ops.cluster)}
        adopted = []
        for record in records:
            seen = running.pop(record.replica_id, None)
            if seen is None:
                logger.info("replica %s of %s/%s is gone; dropping its record",
                            record.replica_id, record.application, record.deployment)
                await self._ops.forget(record)
                continue
            if not record.handle:  # started, but the leader died before recording it
                record.handle = seen.handle
                record.control_address = seen.control_address
                record.http_address = seen.http_address
                record.http_tls = seen.http_tls
                record.metrics_address = seen.metrics_address
                record.grpc_address = seen.grpc_address
            adopted.append(record)
        for orphan in running.values():
            self._stop_orphan(orphan)
        logger.info("recovered %d replicas from the registry", len(adopted))
        await self._prune(set(r.replica_id for r in adopted))
        return adopted

    async def sweep(self, now: float, records: Mapping[str, replica_pb2.ReplicaRecord],
                    views: Callable[[], Iterable[ReplicaView]]) -> None:
        """Report tracked replicas that are gone; stop orphans. At most once per
        LIVENESS_SWEEP_S; `views` is asked only then (after the listing)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + LIVENESS_SWEEP_S
        try:
            listed = await asyncio.wait_for(self._ops.runtime.list(self._ops.cluster),
                                            LIST_TIMEOUT_S)
        except Exception as e:
            logger.warning("cannot list replicas from the runtime: %s", e or "timed out")
            return
        if now - self._last_prune >= PRUNE_EVERY_S:
            await self._prune(set(records))
        alive = {r.replica_id for r in listed}
        self._orphans = {k: v for k, v in self._orphans.items() if k in alive}
        for replica in listed:
            if replica.replica_id in records:
                continue
            first = self._orphans.setdefault(replica.replica_id, now)
            if now - first >= ORPHAN_GRACE_S:
                self._stop_orphan(replica)
        for view in views():
            record = records.get(view.replica_id)
            if (record is not None and record.handle and view.replica_id not in alive
                    and view.state != STOPPING and not view.failure
                    and not self._loop.busy(view.replica_id)):
                self._note_exit(record)

    def _note_exit(self, record: replica_pb2.ReplicaRecord) -> None:
        async def work() -> None:
            exited = await self._ops.exit_reason(record)
            if exited is not None:
                self._post(record.replica_id, exited)

        self._loop.spawn(record.replica_id, work)

    def _stop_orphan(self, orphan: RuntimeReplica) -> None:
        async def work() -> None:
            logger.warning("stopping orphan replica %s (handle %s): no record wants it",
                           orphan.replica_id, orphan.handle)
            self._ops.check_leading()
            await self._ops.runtime.stop(orphan.handle, 5.0)
            await asyncio.to_thread(self._ops.runtime.cleanup, orphan.replica_id)
            self._orphans.pop(orphan.replica_id, None)

        self._loop.spawn(f"orphan:{orphan.replica_id}", work)

    async def _prune(self, keep: set[str]) -> None:
        """Remove what dead replicas no record names left behind (exited containers)."""
        self._last_prune = self._clock.monotonic()
        try:
            removed = await asyncio.wait_for(self._ops.runtime.prune(self._ops.cluster, keep),
                                             LIST_TIMEOUT_S)
        except Exception as e:
            logger.warning("cannot prune dead replicas: %s", e or "timed out")
            return
        if removed:
            logger.info("removed what %d dead replicas left behind: %s", len(removed),
                        ", ".join(removed))
