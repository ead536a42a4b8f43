"""The replica reconciler: every deployment's replicas match its goal.

A reconciler on the generic loop (loop.py); each pass:

1. `begin_pass`: the liveness sweep (inventory.py), then each observation the
   replica I/O (replica_ops.py) brought back, applied by `transitions.apply`;
2. `reconcile(key)`, per deployment the pass visits (visits.py: goal changed,
   replicas observed, unsettled, a health check due; all of them every
   FULL_PASS_S): spawn the probes and health checks due, apply the startup
   deadline, ask the planner (planner.py), and spawn the starts, stops and
   reconfigures it decided;
3. `end_pass`: publish a new ObservedState (observed.py) for what changed and
   tell `on_change` the deployments whose serving replicas changed.

It runs only while this controller leads: the loop stops deciding first, and
a fenced write fails before anything is written after.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from functools import partial

from servefleet._private.messages import error_summary
from servefleet.v1 import records_pb2, replica_pb2

from ..clock import Clock
from ..errors import one_line
from ..keys import ClusterKeys
from ..store import Store
from .goal_index import GoalIndex
from .health import HealthSchedule
from .inventory import Inventory
from .loop import ReconcileLoop
from .observed import ObservedState, Planned
from .planner import (
    RECOVERING,
    RUNNING,
    STARTING,
    STOPPING,
    Goal,
    ReplicaView,
    StartupFailures,
    plan_deployment,
    quiet,
)
from .ranks import NO_RANK, lowest_free
from .replica_ops import ReplicaOps
from .takeover import TAKEOVER_SETTLE_S, TakeoverGrace
from .transitions import (
    Observation,
    Outcome,
    Reconfigured,
    Started,
    apply,
    learned,
    serving,
    startup_deadline,
    stop_timings,
    stopping,
)
from .visits import Visits

logger = logging.getLogger(__name__)
# A replica a proxy or handle ejected is health-checked at once, with the
# deployment's health_check_timeout_s (a replica busy in a handler that holds
# its event loop or its interpreter lock for seconds answers late, not never),
# and again at most this often.
SUSPECT_RECHECK_S = 5.0
# A new term probes at most this many of the replicas it found (RECOVERING) at
# once, new ones' probes first: 1,000 at once held up the rest (docs/scale.md).
MAX_ADOPTION_PROBES = 64
DKey = tuple[str, str]
Goals = Callable[[], list[records_pb2.DeploymentRecord]]


class ReplicaReconciler:
    name = "replicas"

    def __init__(self, keys: ClusterKeys, ops: ReplicaOps, loop: ReconcileLoop, goals: Goals,
                 clock: Clock, on_change: Callable[[str, str], None] | None = None,
                 suspects: Callable[[], set[str]] = set,
                 takeover_settle_s: float = TAKEOVER_SETTLE_S) -> None:
        self._ops, self._loop, self._clock, self._goals = ops, loop, clock, GoalIndex(goals)
        self._on_change = on_change or (lambda app, name: None)
        self._inventory = Inventory(keys, ops, loop, clock, self._post)
        self._views: dict[DKey, dict[str, ReplicaView]] = {}
        self._records: dict[str, replica_pb2.ReplicaRecord] = {}
        # Replicas' token hashes -> (application, deployment, replica id), for their calls.
        self._tokens: dict[str, tuple[str, str, str]] = {}
        self._failures: dict[DKey, StartupFailures] = {}
        self._plans: dict[DKey, Planned] = {}
        self._inbox: list[tuple[str, Observation]] = []
        self._starting: set[str] = set()  # replicas whose start is under way
        self._health = HealthSchedule()
        # Replicas proxies or handles ejected (load reports), and when each was
        # last checked for that: checked at once, at most every SUSPECT_RECHECK_S.
        self._suspects = suspects
        self._suspect_checked: dict[str, float] = {}
        self._routine_checks: set[str] = set()  # replicas a periodic check is under way for
        self._adopting: set[str] = set()  # RECOVERING replicas being probed
        self._dirty: set[DKey] = set()  # to publish (observed.py)
        self._visits: Visits[DKey] = Visits()
        self._now = 0.0  # the pass's
        self._suspect_ids: set[str] = set()
        self._serving_changed: set[DKey] = set()
        self.observed = ObservedState()
        self._takeover = TakeoverGrace(takeover_settle_s)

    async def recover(self, store: Store) -> None:
        now = self._clock.monotonic()
        self._takeover.began(now)
        for record in await self._inventory.recover(store):
            if not record.stopping:
                self._takeover.inherited(record.replica_id)
            # A stop under way is finished by the loop (with the goal's timings).
            self._track(record, ReplicaView(
                record.replica_id, record.slot, record.version, record.code_hash,
                state=STOPPING if record.stopping else RECOVERING, since=now,
                rank=record.rank if record.HasField("rank") else NO_RANK))
        self.end_pass(now)

    def _track(self, record: replica_pb2.ReplicaRecord, view: ReplicaView) -> None:
        key = (record.application, record.deployment)
        self._views.setdefault(key, {})[record.replica_id] = view
        self._record(record)
        self._dirty.add(key)

    def _record(self, record: replica_pb2.ReplicaRecord) -> None:
        self._records[record.replica_id] = record
        if record.token_sha256:
            self._tokens[record.token_sha256] = (record.application, record.deployment,
                                                 record.replica_id)

    def token_owner(self, hashed: str) -> tuple[str, str] | None:
        """(application, deployment) of the tracked replica whose token has the
        hex SHA-256 `hashed` (api/auth.py), or None."""
        found = self._tokens.get(hashed)
        return found[:2] if found else None

    def token_replica(self, hashed: str) -> str | None:
        """The id of the tracked replica whose token has that hash, or None."""
        found = self._tokens.get(hashed)
        return found[2] if found else None

    def _post(self, replica_id: str, seen: Observation) -> None:
        self._inbox.append((replica_id, seen))

    def _run(self, replica_id: str, io: Callable[[], Awaitable[Observation]],
             replace_work: bool = False) -> bool:
        async def work() -> None:
            self._post(replica_id, await io())

        return self._loop.spawn(replica_id, work, replace=replace_work)

    # -- 1. observations ------------------------------------------------------------

    def goal_changed(self, application: str, name: str) -> None:
        """The deployment's record changed (the table's change hook)."""
        self._goals.changed()
        self._visits.mark((application, name))

    async def begin_pass(self, now: float) -> None:
        self._now = now
        await self._inventory.sweep(now, self._records, lambda: [
            v for vs in self._views.values() for v in vs.values()])
        for key in self._goals.refresh(self._views, force=self._visits.full_due(now)):
            self._visits.mark(key)
        self._suspect_ids = self._suspects()
        for replica_id in self._suspect_ids:
            if (record := self._records.get(replica_id)) is not None:
                self._visits.mark((record.application, record.deployment))
        inbox, self._inbox = self._inbox, []
        for replica_id, seen in inbox:
            record = self._records.get(replica_id)
            if record is None:
                continue
            key = (record.application, record.deployment)
            view = self._views.get(key, {}).get(replica_id)
            if view is None:
                continue
            if isinstance(seen, Started | Reconfigured) and seen.record is not None:
                self._record(seen.record)
            current = view.is_current(self._goals.last_goal(key))
            alone = not any(serving(v) for v in self._views[key].values() if v is not view)
            self._apply(key, view, apply(view, seen, current=current, now=now, alone=alone),
                        now)

    def _apply(self, key: DKey, before: ReplicaView, outcome: Outcome, now: float) -> None:
        """Put a transition's outcome in place: the view, the failure record, the news."""
        after, replica_id = outcome.view, before.replica_id
        if outcome.changes_nothing(before):  # e.g. a passing health check
            return
        if after is None:
            self._views.get(key, {}).pop(replica_id, None)
            gone = self._records.pop(replica_id, None)
            if gone is not None:
                self._tokens.pop(gone.token_sha256, None)
            self._health.forget(replica_id)
            self._suspect_checked.pop(replica_id, None)
            self._loop.forget(replica_id)
        else:
            self._views[key][replica_id] = after
            if after.failure and not before.failure:
                logger.warning("replica %s of %s/%s failed: %s", replica_id, *key,
                               one_line(error_summary(after.failure)))
            elif after.state == RUNNING and before.state != RUNNING:
                logger.info("replica %s of %s/%s is %s", replica_id, *key,
                            "adopted" if before.state == RECOVERING else "running")
        self._failures[key] = learned(self._failures.get(key, StartupFailures()), outcome, now)
        self._dirty.add(key)
        self._visits.mark(key)
        if outcome.serving_changed:
            self._serving_changed.add(key)

    # -- 2. decisions ------------------------------------------------------------------

    def keys(self) -> Iterable[DKey]:
        return self._visits.due(self._now, lambda: self._goals.keys() | set(self._views))

    def reconcile(self, key: DKey, now: float) -> None:
        record, goal = self._goals.record(key), self._goals.goal(key)
        views = self._views.get(key, {})
        if record is not None and goal is not None:
            self._observe(key, views, record, goal, now)
        plan, failures = plan_deployment(goal, list(views.values()),
                                         self._failures.get(key, StartupFailures()), now)
        if goal is None or goal.deleted:
            # Its failures go with it: deployed again, it starts afresh.
            self._failures.pop(key, None)
        else:
            self._failures[key] = failures
        planned = self._plans.get(key)
        if planned != (goal, plan.status, plan.message, plan.start_error):
            if planned is None or (planned[1], planned[3]) != (plan.status, plan.start_error):
                # Whether callers should wait for a replica is in the replica
                # set (ReplicaSet.unavailable): republish it.
                self._serving_changed.add(key)
            self._plans[key] = (goal, plan.status, plan.message, plan.start_error)
            self._dirty.add(key)
        for replica_id in plan.stop:
            if not self._takeover.hold(key, views[replica_id], record, now):
                self._stop(key, replica_id, record, now)
        # A stop that failed (store or runtime trouble), one recovered from the
        # registry, or one that waited for its start is carried out (again).
        for view in list(views.values()):
            if view.state == STOPPING and not self._loop.busy(view.replica_id):
                self._stop(key, view.replica_id, record, now)
        if record is not None and not record.deleted:
            self._rerank(key, plan.rerank)
            for slot in plan.start_slots:
                self._start(key, slot, record, now)
            for replica_id in plan.reconfigure:
                if not self._loop.busy(replica_id):
                    self._run(replica_id, partial(self._ops.reconfigure,
                                                  self._records[replica_id], record,
                                                  views[replica_id].rank))
        if not views and (record is None or record.deleted):
            for table in (self._views, self._plans, self._failures):
                table.pop(key, None)
            self._goals.forget(key)
            self._visits.forget(key)
            self._dirty.add(key)
        else:  # visited again when a health check is due, or every pass until quiet
            self._visits.visited(key, self._health.next_of(views)
                                 if quiet(plan, views.values()) else None)

    def _rerank(self, key: DKey, ranks: dict[str, int]) -> None:
        """Give replicas their new ranks (ranks.py), to be recorded and told
        by their reconfigure; new starts take the ranks left free."""
        for replica_id, rank in ranks.items():
            views = self._views[key]
            views[replica_id] = replace(views[replica_id], rank=rank, rank_recorded=False)
            self._dirty.add(key)

    def gave_up(self, key: DKey) -> bool:
        """Whether starts of the deployment's current goal stopped for good
        (planner.py: DEPLOY_FAILED, or UNHEALTHY with some replicas up)."""
        goal, failures = self._goals.goal(key), self._failures.get(key)
        return goal is not None and failures is not None and failures.gave_up(goal)

    def retry(self, key: DKey) -> bool:
        """Start the deployment's replicas again after it gave up (a deploy of
        the same spec asked); False, changing nothing, if it had not."""
        if not self.gave_up(key):
            return False
        self._failures[key] = self._failures[key].retried()
        logger.info("%s/%s: deployed again unchanged after its replicas failed to start: "
                    "starting them again", *key)
        self._dirty.add(key)
        self._visits.mark(key)
        self._loop.wake()
        return True

    def _run_counted(self, under_way: set[str], replica_id: str,
                     io: Callable[[], Awaitable[Observation]]) -> None:
        """`_run`, with `replica_id` in `under_way` from now until its task ends."""
        if self._run(replica_id, io) and (task := self._loop.task(replica_id)) is not None:
            under_way.add(replica_id)
            task.add_done_callback(lambda _: under_way.discard(replica_id))

    def _observe(self, key: DKey, views: dict[str, ReplicaView],
                 record: records_pb2.DeploymentRecord, goal: Goal, now: float) -> None:
        config = record.spec.replica_config
        suspects = self._suspect_ids
        for view in list(views.values()):
            replica_id, replica = view.replica_id, self._records[view.replica_id]
            suspect = (view.state == RUNNING and replica_id in suspects
                       and now - self._suspect_checked.get(replica_id, -SUSPECT_RECHECK_S)
                       >= SUSPECT_RECHECK_S)
            # A suspect's check replaces a routine one under way (whose failure
            # would be one of HEALTH_FAILURE_THRESHOLD, where a suspect's may
            # replace it at once); any other operation on the replica goes first.
            if view.failure or (self._loop.busy(replica_id) and not (
                    suspect and replica_id in self._routine_checks)):
                continue
            if suspect:
                self._suspect_checked[replica_id] = now
                logger.info("replica %s of %s/%s: ejected by a proxy or handle; checking "
                            "its health now", replica_id, *key)
                self._run(replica_id, partial(self._ops.check_health, replica,
                                              config.health_check_timeout_s, suspect=True),
                          replace_work=True)
            elif view.state == RUNNING:
                if self._health.due(replica_id, now, config.health_check_period_s):
                    self._run_counted(self._routine_checks, replica_id, partial(
                        self._ops.check_health, replica, config.health_check_timeout_s))
            elif view.state in (STARTING, RECOVERING):
                expired = startup_deadline(view, now, goal.startup_timeout_s,
                                           current=view.is_current(goal))
                if expired is not None:
                    self._apply(key, view, expired, now)
                elif view.state == STARTING or len(self._adopting) < MAX_ADOPTION_PROBES:
                    self._run_counted(self._adopting if view.state == RECOVERING else set(),
                                      replica_id, partial(self._ops.probe_starting, replica))

    def _start(self, key: DKey, slot: int, goal: records_pb2.DeploymentRecord,
               now: float) -> None:
        replica_id = f"{goal.spec.name}-{secrets.token_hex(4)}"
        rank = lowest_free(v.rank for v in self._views.get(key, {}).values()
                           if v.state != STOPPING)
        record = replica_pb2.ReplicaRecord(
            replica_id=replica_id, application=key[0], deployment=key[1], slot=slot,
            version=goal.version, code_hash=goal.code_hash, rank=rank)
        self._track(record, ReplicaView(replica_id, slot, goal.version, goal.code_hash,
                                        state=STARTING, since=now, rank=rank))
        logger.info("starting replica %s of %s/%s (slot %d, rank %d, version %s)", replica_id,
                    *key, slot, rank, goal.version)
        self._starting.add(replica_id)

        async def start() -> Observation:
            try:
                return await self._ops.start(record, goal, self._clock.time())
            finally:
                self._starting.discard(replica_id)

        self._run(replica_id, start)

    def _stop(self, key: DKey, replica_id: str, goal: records_pb2.DeploymentRecord | None,
              now: float) -> None:
        view = self._views[key][replica_id]
        if view.state != STOPPING:
            self._apply(key, view, stopping(view), now)
            logger.info("stopping replica %s of %s/%s%s", replica_id, *key,
                        f" ({view.failure.splitlines()[0]})" if view.failure else "")
        elif self._loop.busy(replica_id):
            return
        if replica_id in self._starting:  # stopped once its start is over, or the
            return  # runtime could run a replica that its record never names
        wait_loop, timeout = stop_timings(
            goal.spec.replica_config if goal is not None else None, view)
        # A replica that served is drained once the proxies and handles let go
        # of it (drain_fence.py); a failed one has nothing worth the wait.
        fence = 0.0 if view.failure else timeout
        # A probe or health check under way is cancelled: its answer no longer matters.
        self._run(replica_id, lambda: self._ops.stop(self._records[replica_id], wait_loop,
                                                     timeout, fence), replace_work=True)

    # -- 3. publishing --------------------------------------------------------------------

    def end_pass(self, now: float) -> None:
        if self._dirty:
            self.observed = self.observed.updated(self._dirty, self._views, self._plans,
                                                  self._records)
            self._dirty.clear()
        changed, self._serving_changed = self._serving_changed, set()
        for key in sorted(changed):
            self._on_change(*key)
