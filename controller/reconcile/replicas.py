"""The reconcile loop: keep every deployment's replicas matching its goal.

One loop owns retries and isolation (after controller-runtime's): each tick
re-reads the goals and the observed replicas, asks the planner what to do for
each deployment, and hands the work to background tasks (one per replica at a
time), so a slow start, drain or health check never stalls the tick. An
exception in one deployment's step is logged and that deployment is tried
again next tick; the others go on.

Observation is soft state, rebuilt after a failover by `recover`: the
registry records are matched with what the runtime runs; matches become
RECOVERING and are adopted (no restart) once they answer as ready; records
whose replica is gone are dropped; replicas without a record are orphans and
are stopped; stops that were under way are finished.

The loop runs only while this controller leads. Losing leadership cancels it
and its tasks: a fenced write fails first, so nothing is written after.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from servefleet.v1 import records_pb2, replica_pb2

from ..api.status import target_replicas
from ..clock import Clock
from ..errors import NotLeader, Unavailable
from ..keys import ClusterKeys
from ..runtime import RuntimeReplica
from ..store import Store
from .planner import (
    RECOVERING,
    RUNNING,
    STARTING,
    STOPPING,
    Goal,
    Plan,
    ReplicaView,
    StartupFailures,
    plan_deployment,
)
from .replica_ops import ReplicaOps, config_hash

logger = logging.getLogger(__name__)
DKey = tuple[str, str]

LIVENESS_SWEEP_S = 0.5
ORPHAN_GRACE_S = 5.0
HEALTH_FAILURE_THRESHOLD = 3
MAX_REASON_CHARS = 2000
LIST_TIMEOUT_S = 5.0
# Backoff of a replica operation that keeps failing (a stop, a start's registry write).
RETRY_BASE_S = 0.5
RETRY_MAX_S = 5.0
PRUNE_EVERY_S = 30.0


def goal_of(record: records_pb2.DeploymentRecord) -> Goal:
    config = record.spec.replica_config
    return Goal(version=record.version, code_hash=record.code_hash,
                target=target_replicas(record),
                config_hash=config_hash(config.user_config_json, config.max_ongoing_requests),
                deleted=record.deleted)


class Reconciler:
    def __init__(self, keys: ClusterKeys, ops: ReplicaOps,
                 goals: Callable[[], list[records_pb2.DeploymentRecord]],
                 clock: Clock | None = None, tick_s: float = 0.1,
                 on_change: Callable[[str, str], None] | None = None) -> None:
        self._keys = keys
        # Told (application, deployment) whenever its set of RUNNING replicas changes.
        self._on_change = on_change or (lambda app, name: None)
        self._ops = ops
        self._goals = goals
        self._clock = clock or Clock()
        self._tick_s = tick_s
        self.views: dict[DKey, dict[str, ReplicaView]] = {}
        self.records: dict[str, replica_pb2.ReplicaRecord] = {}
        # The last plan of each deployment, with the goal it was made for.
        self.plans: dict[DKey, tuple[Goal | None, Plan]] = {}
        self._failures: dict[DKey, StartupFailures] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Replicas whose start is under way: a stop waits for it rather than
        # cancel it, or the runtime could run a replica its record never names.
        self._starting: dict[str, asyncio.Task[None]] = {}
        self._next_health: dict[str, float] = {}
        self._next_sweep = 0.0
        # Replicas the runtime runs that no record names, by when first seen.
        self._orphans: dict[str, float] = {}
        # goal_of() per deployment, recomputed only when its record object changes.
        self._goal_cache: dict[DKey, tuple[records_pb2.DeploymentRecord, Goal]] = {}
        self._last_prune = 0.0
        # Per replica: failed attempts in a row, and when the next may start.
        self._failed_in_a_row: dict[str, int] = {}
        self._retry_after: dict[str, float] = {}

    # -- recovery after an election ----------------------------------------------

    async def recover(self, store: Store) -> None:
        records = [replica_pb2.ReplicaRecord.FromString(kv.value)
                   for kv in await store.list_prefix(self._keys.replicas)]
        running = {r.replica_id: r for r in await self._ops.runtime.list(self._ops.cluster)}
        adopted = 0
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
            # A stop under way is finished by the loop (with the goal's timings).
            self._track(record, STOPPING if record.stopping else RECOVERING)
            adopted += 1
        for orphan in running.values():
            self._stop_orphan(orphan)
        logger.info("recovered %d replicas from the registry", adopted)
        await self._prune()

    async def _prune(self) -> None:
        """Remove what dead replicas no record names left behind (exited containers)."""
        self._last_prune = self._clock.monotonic()
        try:
            removed = await asyncio.wait_for(
                self._ops.runtime.prune(self._ops.cluster, set(self.records)), LIST_TIMEOUT_S)
        except Exception as e:
            logger.warning("cannot prune dead replicas: %s", e or "timed out")
            return
        if removed:
            logger.info("removed what %d dead replicas left behind: %s", len(removed),
                        ", ".join(removed))

    def _stop_orphan(self, orphan: RuntimeReplica) -> None:
        logger.warning("stopping orphan replica %s (handle %s): no record wants it",
                       orphan.replica_id, orphan.handle)

        async def stop() -> None:
            self._ops.check_leading()
            await self._ops.runtime.stop(orphan.handle, 5.0)
            await asyncio.to_thread(self._ops.runtime.cleanup, orphan.replica_id)
            self._orphans.pop(orphan.replica_id, None)

        self._spawn(f"orphan:{orphan.replica_id}", stop)

    def _track(self, record: replica_pb2.ReplicaRecord, state: int) -> ReplicaView:
        view = ReplicaView(replica_id=record.replica_id, slot=record.slot,
                           version=record.version, code_hash=record.code_hash, state=state)
        self.views.setdefault((record.application, record.deployment), {})[
            record.replica_id] = view
        self.records[record.replica_id] = record
        return view

    # -- the loop --------------------------------------------------------------------

    async def run(self) -> None:
        try:
            while True:
                try:
                    await self.tick()
                except (NotLeader, asyncio.CancelledError):
                    raise
                except Exception:
                    logger.exception("reconcile tick failed; next tick in %gs", self._tick_s)
                await self._clock.sleep(self._tick_s)
        finally:
            await self.cancel_tasks()

    async def cancel_tasks(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def tick(self) -> None:
        if not self._ops.leading():
            return  # leadership is being lost: act on nothing (the term is ending)
        now = self._clock.monotonic()
        if now >= self._next_sweep:
            self._next_sweep = now + LIVENESS_SWEEP_S
            await self._sweep_liveness()
        goals = {(r.spec.application, r.spec.name): r for r in self._goals()
                 if not r.deleted or (r.spec.application, r.spec.name) in self.views}
        for key in sorted(set(goals) | set(self.views)):
            try:
                self._reconcile(key, goals.get(key), now)
            except Exception:
                logger.exception("reconciling %s/%s failed; retrying next tick", *key)

    async def _sweep_liveness(self) -> None:
        """One runtime list: replicas gone are failed; unknown ones are orphans.

        An orphan is a replica no record names (say, one an old leader launched
        after it lost its lease); it is stopped once seen on two sweeps
        ORPHAN_GRACE_S apart, so a start under way is never mistaken for one.
        """
        try:
            # Bounded: a slow runtime (a Docker engine under load) must not hold
            # up the tick; the next sweep tries again.
            listed = await asyncio.wait_for(self._ops.runtime.list(self._ops.cluster),
                                            LIST_TIMEOUT_S)
        except Exception as e:
            logger.warning("cannot list replicas from the runtime: %s",
                           e or "timed out")
            return
        alive = {r.replica_id for r in listed}
        now = self._clock.monotonic()
        if now - self._last_prune >= PRUNE_EVERY_S:
            await self._prune()
        self._orphans = {k: v for k, v in self._orphans.items() if k in alive}
        for replica in listed:
            if replica.replica_id in self.records:
                continue
            first = self._orphans.setdefault(replica.replica_id, now)
            if now - first >= ORPHAN_GRACE_S and f"orphan:{replica.replica_id}" \
                    not in self._tasks:
                self._stop_orphan(replica)
        for views in self.views.values():
            for view in views.values():
                record = self.records.get(view.replica_id)
                if (record is not None and record.handle and view.replica_id not in alive
                        and view.state != STOPPING and not view.failure
                        and view.replica_id not in self._tasks):
                    self._spawn(view.replica_id, partial(self._note_exit, view, record))

    async def _note_exit(self, view: ReplicaView, record: replica_pb2.ReplicaRecord) -> None:
        reason = await self._ops.exit_reason(record)
        if reason is not None and view.state != STOPPING:
            self._fail(view, reason.text, count=not reason.bind_failure)

    def _reconcile(self, key: DKey, record: records_pb2.DeploymentRecord | None,
                   now: float) -> None:
        views = self.views.get(key, {})
        if record is not None:
            self._observe(views, record, now)
        failures = self._failures.setdefault(key, StartupFailures())
        goal = self._goal(key, record) if record is not None else None
        plan = plan_deployment(goal, list(views.values()), failures, now)
        self.plans[key] = (goal, plan)
        for replica_id in plan.stop:
            self._stop(self.records[replica_id], record)
        # A stop that failed (store or runtime trouble), or one recovered from
        # the registry, is carried out (again) until the replica is gone.
        for view in list(views.values()):
            if view.state == STOPPING and view.replica_id not in self._tasks:
                self._stop(self.records[view.replica_id], record)
        if record is not None and not record.deleted:
            for slot in plan.start_slots:
                self._start(key, slot, record)
            for replica_id in plan.reconfigure:
                if replica_id not in self._tasks:
                    self._spawn(replica_id, partial(self._reconfigure, views[replica_id], record))
        if not views and (record is None or record.deleted):
            self.views.pop(key, None)
            self.plans.pop(key, None)
            self._failures.pop(key, None)
            self._goal_cache.pop(key, None)

    def _goal(self, key: DKey, record: records_pb2.DeploymentRecord) -> Goal:
        cached = self._goal_cache.get(key)
        if cached is None or cached[0] is not record:
            cached = (record, goal_of(record))
            self._goal_cache[key] = cached
        return cached[1]

    # -- observing ----------------------------------------------------------------------

    def _observe(self, views: dict[str, ReplicaView], goal: records_pb2.DeploymentRecord,
                 now: float) -> None:
        config = goal.spec.replica_config
        for view in views.values():
            if view.replica_id in self._tasks or view.failure:
                continue
            record = self.records[view.replica_id]
            if view.state in (STARTING, RECOVERING):
                self._spawn(view.replica_id, partial(self._probe_starting, view, record, goal))
            elif view.state == RUNNING and now >= self._next_health.setdefault(
                    view.replica_id, now + config.health_check_period_s * random.random()):
                # Jittered by +-10%, so replicas that started together (after a
                # deploy or a failover) do not all get checked in the same tick.
                self._next_health[view.replica_id] = now + config.health_check_period_s * (
                    random.uniform(0.9, 1.1))
                self._spawn(view.replica_id, partial(self._check_health, view, record,
                                                     config.health_check_timeout_s))

    async def _probe_starting(self, view: ReplicaView, record: replica_pb2.ReplicaRecord,
                              goal: records_pb2.DeploymentRecord) -> None:
        result = await self._ops.probe_starting(record)
        if view.state == STOPPING:
            return  # a stop was decided meanwhile: its word is final
        if result.failure:
            self._fail(view, result.failure, count=not result.bind_failure)
        elif view.state == RECOVERING and result.loading:
            view.state = STARTING  # it was still starting when the old leader died
            self._on_change(record.application, record.deployment)
            await self._clock.sleep(0.1)
        elif result.ready:
            recovered = view.state == RECOVERING
            view.state = RUNNING
            view.config_hash = result.config_hash
            key = (record.application, record.deployment)
            self._on_change(*key)
            if view.version == goal.version and view.code_hash == goal.code_hash:
                self._failures.setdefault(key, StartupFailures()).record_success()
            logger.info("replica %s of %s/%s is %s", view.replica_id, *key,
                        "adopted" if recovered else "running")
        else:
            await self._clock.sleep(0.1)  # still loading: look again shortly

    async def _check_health(self, view: ReplicaView, record: replica_pb2.ReplicaRecord,
                            timeout_s: float) -> None:
        problem = await self._ops.check_health(record, timeout_s)
        if view.state == STOPPING:
            return
        if not problem:
            view.health_failures, view.message = 0, ""
            return
        view.health_failures += 1
        view.message = problem
        logger.warning("replica %s: %s (%d in a row)", view.replica_id, problem,
                       view.health_failures)
        if view.health_failures >= HEALTH_FAILURE_THRESHOLD:
            self._fail(view, f"{problem} ({view.health_failures} times in a row)")

    def _fail(self, view: ReplicaView, reason: str, *, count: bool = True) -> None:
        """Mark a replica failed (the planner stops and replaces it).

        A failed start counts toward the retry cap only when it is the current
        goal's replica and its own fault (not a port collision or the store).
        """
        view.failed_starting = view.state in (STARTING, RECOVERING)
        view.failure = reason
        record = self.records[view.replica_id]
        key = (record.application, record.deployment)
        self._on_change(*key)
        failures = self._failures.setdefault(key, StartupFailures())
        cached = self._goal_cache.get(key)
        is_current = cached is not None and view.is_current(cached[1])
        if view.state == STARTING and count and is_current:
            # The whole reason (a traceback, an exit code with the last output),
            # capped: it ends up in the deployment's status message.
            failures.record(reason.strip()[-MAX_REASON_CHARS:], self._clock.monotonic())
        elif view.state == STARTING:
            failures.delay(self._clock.monotonic())  # not counted, but no hammering
        elif view.state == RUNNING:
            failures.incident = f"replica {view.replica_id} was replaced: {reason}"
        logger.warning("replica %s of %s/%s failed: %s", view.replica_id, *key, reason)

    # -- acting -------------------------------------------------------------------------

    def _spawn(self, replica_id: str, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Run `work()` as the replica's one background task.

        `work` is called inside the task, so a task cancelled before it ran
        leaves no coroutine behind.
        """
        if self._clock.monotonic() < self._retry_after.get(replica_id, 0.0):
            return  # backing off after failed attempts: a later tick spawns it again
        task = asyncio.create_task(self._guarded(replica_id, work), name=f"replica-{replica_id}")
        self._tasks[replica_id] = task
        task.add_done_callback(lambda t: self._tasks.pop(replica_id, None)
                               if self._tasks.get(replica_id) is t else None)

    async def _guarded(self, replica_id: str,
                       work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except NotLeader:
            logger.warning("replica %s: leadership lost; stopping work", replica_id)
        except Exception as e:
            self._back_off(replica_id, e)
        else:
            self._failed_in_a_row.pop(replica_id, None)
            self._retry_after.pop(replica_id, None)

    def _back_off(self, replica_id: str, error: Exception) -> None:
        """A replica operation failed (store down, runtime error, a bug): retry it
        after RETRY_BASE_S, doubling up to RETRY_MAX_S while it keeps failing;
        the traceback is logged once per streak, not on every tick."""
        count = self._failed_in_a_row.get(replica_id, 0) + 1
        self._failed_in_a_row[replica_id] = count
        delay = min(RETRY_MAX_S, RETRY_BASE_S * 2 ** (count - 1))
        self._retry_after[replica_id] = self._clock.monotonic() + delay
        if count == 1 and not isinstance(error, Unavailable):
            logger.exception("replica %s: operation failed; retrying in %.1fs", replica_id,
                             delay)
        else:
            logger.warning("replica %s: %s (failed %d times in a row); retrying in %.1fs",
                           replica_id, error, count, delay)

    def _start(self, key: DKey, slot: int, goal: records_pb2.DeploymentRecord) -> None:
        replica_id = f"{goal.spec.name}-{secrets.token_hex(4)}"
        record = replica_pb2.ReplicaRecord(
            replica_id=replica_id, application=key[0], deployment=key[1], slot=slot,
            version=goal.version, code_hash=goal.code_hash)
        view = self._track(record, STARTING)
        logger.info("starting replica %s of %s/%s (slot %d, version %s)", replica_id, *key,
                    slot, goal.version)

        async def start() -> None:
            try:
                await self._ops.start(record, goal, self._clock.time())
            except NotLeader:
                raise
            except Unavailable as e:
                # Not the replica's fault; stopping it clears whatever was written.
                self._fail(view, f"could not start: {e}", count=False)
            except Exception as e:
                self._fail(view, f"could not start: {type(e).__name__}: {e}")
            finally:
                self._starting.pop(replica_id, None)

        self._spawn(replica_id, start)
        self._starting[replica_id] = self._tasks[replica_id]

    def _stop(self, record: replica_pb2.ReplicaRecord,
              goal: records_pb2.DeploymentRecord | None = None) -> None:
        view = self.views[(record.application, record.deployment)][record.replica_id]
        if view.state == STOPPING and record.replica_id in self._tasks:
            return
        view.state = STOPPING
        self._on_change(record.application, record.deployment)
        previous = self._tasks.get(record.replica_id)
        starting = self._starting.pop(record.replica_id, None)
        if previous is not None and previous is not starting:
            previous.cancel()  # a probe or health check: its answer no longer matters
        config = goal.spec.replica_config if goal is not None else None
        wait_loop = config.graceful_shutdown_wait_loop_s if config else 2.0
        timeout = config.graceful_shutdown_timeout_s if config else 20.0
        if view.failure:
            timeout = min(timeout, 5.0)  # a failed replica has nothing worth waiting for
        logger.info("stopping replica %s of %s/%s%s", record.replica_id, record.application,
                    record.deployment, f" ({view.failure.splitlines()[0]})"
                    if view.failure else "")


        async def stop() -> None:
            if previous is not None and not previous.done():
                # asyncio.wait neither raises the task's error nor cancels it
                # if this stop is cancelled in turn.
                await asyncio.wait({previous})
            await self._ops.stop(record, wait_loop, timeout)
            views = self.views.get((record.application, record.deployment), {})
            views.pop(record.replica_id, None)
            self.records.pop(record.replica_id, None)
            self._next_health.pop(record.replica_id, None)
            self._failed_in_a_row.pop(record.replica_id, None)
            self._retry_after.pop(record.replica_id, None)

        self._spawn(record.replica_id, stop)

    async def _reconfigure(self, view: ReplicaView,
                           goal: records_pb2.DeploymentRecord) -> None:
        try:
            applied = await self._ops.reconfigure(self.records[view.replica_id], goal)
        except NotLeader:
            raise
        except Exception as e:
            if view.state != STOPPING:
                self._fail(view, f"reconfigure failed: {e}")
            return
        view.config_hash = applied

    async def wait_tasks(self) -> None:
        """Wait for the replica work under way now (tests and benchmarks)."""
        await asyncio.gather(*list(self._tasks.values()), return_exceptions=True)

    async def wait_empty(self, timeout_s: float) -> bool:
        """Wait until no replica is tracked (all stopped); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while any(self.views.values()) and loop.time() < deadline:
            await asyncio.sleep(0.1)
        return not any(self.views.values())

    # -- reporting ------------------------------------------------------------------------

