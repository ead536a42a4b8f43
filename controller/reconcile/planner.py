"""What to do with one deployment's replicas: pure decisions, no I/O.

`plan_deployment(goal, replicas, failures, now)` looks at the goal and the
replicas as last observed and returns a `Plan` (the slots to start, the
replicas to stop and to reconfigure, and the deployment's status) with the
deployment's startup-failure record as it stands after the plan. Nothing
here changes its arguments: views and failure records are immutable, and
every change makes a new one. The replica reconciler (replicas.py) carries
the plan out; how one replica's state changes is in transitions.py.
Everything here runs under a fake clock in tests/test_planner.py.

The rules, after Ray Serve's deployment state manager:

- A replica is *current* when it runs the goal's version and code hash.
  Replicas that are neither current nor stopping are *old*.
- Scaling: start current replicas in the lowest free slots until there are
  `target`; stop the surplus, not-yet-running ones first, then the highest
  slots.
- Rolling update (old replicas exist): at most max(1, 20% of target) new
  replicas start at a time; old replicas are stopped only while the RUNNING
  count stays at or above the target. Old replicas that are not running are
  stopped at once: they serve nothing.
- Lightweight changes (user_config, max_ongoing_requests): running current
  replicas whose applied config differs are reconfigured in place; so are
  those whose rank or world size (the target) is not the one they were told.
- Ranks (ranks.py): once the deployment is HEALTHY, replicas ranked at or
  past the target move down to the free ranks below it (`Plan.rerank`), and
  are reconfigured with them.
- Failures: a replica that failed (startup error, died, 3 failed health
  checks in a row) is stopped and replaced. Startup failures back off
  exponentially and stop after min(3 x target, 20) attempts for the same
  goal: the deployment is then DEPLOY_FAILED (UNHEALTHY if some replicas of
  the goal run), and no more starts are tried until the goal changes, or
  until a deploy of the same goal asks again (`StartupFailures.retried`).
  A deployment deleted and deployed again is a new incarnation (its
  record's start_time): its failures start afresh, whatever its spec.
- While the last start of the goal failed and no replica serves, the plan
  names that start's error (`Plan.start_error`): callers are refused with
  it at once rather than queued through the retries (unservable.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from servefleet.v1 import records_pb2, replica_pb2, status_pb2

from ..goals.spec import target_replicas
from .loop import BACKOFF
from .ranks import NO_RANK, compacted

# Plain ints: enum attribute lookups on the generated wrapper cost more than
# the rest of a plan (the tick benchmark showed it).
STARTING = replica_pb2.REPLICA_STATE_STARTING
RUNNING = replica_pb2.REPLICA_STATE_RUNNING
STOPPING = replica_pb2.REPLICA_STATE_STOPPING
RECOVERING = replica_pb2.REPLICA_STATE_RECOVERING

MAX_STARTUP_RETRIES = 20
ROLLOUT_FRACTION = 0.2
# (incarnation, version, code hash, config hash, target): see Goal.token.
Token = tuple[int, str, str, str, int]


@dataclass(frozen=True, slots=True)
class Goal:
    """What the deployment's record asks for."""

    version: str
    code_hash: str
    target: int
    # Digest of the fields applied by Reconfigure (user_config, max_ongoing_requests).
    config_hash: str
    deleted: bool = False
    # Seconds a replica may take to become ready before it counts as a failed start.
    startup_timeout_s: float = 300.0
    # The record's start_time (ns): a deployment deleted and deployed again
    # is a new incarnation, even with the very same spec.
    created: int = 0

    @property
    def token(self) -> Token:
        """Changes whenever the goal does: resets the startup-failure count."""
        return (self.created, self.version, self.code_hash, self.config_hash, self.target)


def config_hash(user_config_json: str, max_ongoing_requests: int) -> str:
    """Digest of what Reconfigure applies, comparable between goal and replica."""
    blob = json.dumps([user_config_json, max_ongoing_requests]).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def goal_of(record: records_pb2.DeploymentRecord) -> Goal:
    config = record.spec.replica_config
    return Goal(version=record.version, code_hash=record.code_hash,
                target=target_replicas(record),
                config_hash=config_hash(config.user_config_json, config.max_ongoing_requests),
                deleted=record.deleted, startup_timeout_s=config.startup_timeout_s,
                created=record.start_time.ToNanoseconds())


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica as the controller last observed it (soft state); immutable,
    changed only by the pure functions of transitions.py."""

    replica_id: str
    slot: int
    version: str
    code_hash: str
    state: replica_pb2.ReplicaState = STARTING
    # Monotonic time it entered STARTING (or was adopted): the startup timeout's origin.
    since: float = 0.0
    # The config_hash it runs; "" until known.
    config_hash: str = ""
    health_failures: int = 0
    # Set when it failed: the reason, and whether it failed while starting.
    failure: str = ""
    failed_starting: bool = False
    message: str = ""
    # Times a check made because proxies or handles ejected it found it healthy
    # (published with its endpoint: they take it back).
    cleared: int = 0
    # Its rank (its record's; NO_RANK: none), and the (rank, world size) it
    # said it runs with; None until known, and for replicas that know nothing
    # of ranks (they report no world size): those are not chased with them.
    rank: int = NO_RANK
    placed: tuple[int, int] | None = None
    # False while a new rank (Plan.rerank) is not yet in its record.
    rank_recorded: bool = True

    def is_current(self, goal: Goal | None) -> bool:
        return (goal is not None and self.version == goal.version
                and self.code_hash == goal.code_hash)

    def misplaced(self, target: int) -> bool:
        """Whether its rank is yet to be recorded, or it was told another rank
        or world size than it should have."""
        return not self.rank_recorded or (
            self.placed is not None and self.placed != (self.rank, target))


@dataclass(frozen=True, slots=True)
class StartupFailures:
    """Startup failures of one deployment for its current goal (policy state)."""

    token: Token | tuple[()] = ()
    count: int = 0
    last_error: str = ""
    next_attempt_at: float = 0.0
    # Why a running replica was last replaced (failed health checks, exited);
    # the deployment shows UNHEALTHY with it until it is back at its target.
    incident: str = ""

    def for_goal(self, goal: Goal) -> StartupFailures:
        """This record, or a fresh one when the goal changed since it was made
        (an incident outlives an update, not a deletion: see Goal.created)."""
        if goal.token == self.token:
            return self
        same_incarnation = self.token[:1] == goal.token[:1]
        return StartupFailures(token=goal.token,
                               incident=self.incident if same_incarnation else "")

    def gave_up(self, goal: Goal) -> bool:
        """Whether starts of `goal` stopped for good (DEPLOY_FAILED, or
        UNHEALTHY with some of its replicas up) until it changes or is retried."""
        return self.token == goal.token and self.count >= retry_cap(goal.target)

    def retried(self) -> StartupFailures:
        """Asked to try again (a deploy of the same spec): a fresh count, at once."""
        return replace(self, count=0, last_error="", next_attempt_at=0.0)

    def failed(self, error: str, now: float) -> StartupFailures:
        """One more failed start; the next waits BACKOFF."""
        count = self.count + 1
        return replace(self, count=count, last_error=error,
                       next_attempt_at=now + BACKOFF.delay(count))

    def held(self, now: float, seconds: float = 1.0) -> StartupFailures:
        """Hold off the next start without counting a failure (e.g. a port collision)."""
        return replace(self, next_attempt_at=max(self.next_attempt_at, now + seconds))

    def succeeded(self) -> StartupFailures:
        return replace(self, count=0, next_attempt_at=0.0)

    def with_incident(self, incident: str) -> StartupFailures:
        return self if incident == self.incident else replace(self, incident=incident)


def retry_cap(target: int) -> int:
    return max(1, min(3 * target, MAX_STARTUP_RETRIES))


@dataclass(slots=True)
class Plan:
    start_slots: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    reconfigure: list[str] = field(default_factory=list)
    status: status_pb2.DeploymentStatus = status_pb2.DEPLOYMENT_STATUS_UPDATING
    message: str = ""
    # The error of the goal's last start when it failed and no replica serves:
    # no replica is to be expected soon, so callers are not kept waiting.
    start_error: str = ""
    # Replicas whose rank changes (ranks.py), with their new ranks; each is
    # in `reconfigure` too.
    rerank: dict[str, int] = field(default_factory=dict)


def _by_slot_desc(views: list[ReplicaView]) -> list[ReplicaView]:
    return sorted(views, key=lambda v: (v.slot, v.replica_id), reverse=True)


def _settled(goal: Goal, replicas: list[ReplicaView], failures: StartupFailures) -> bool:
    """The common case, answered without building the plan's lists: exactly
    `target` healthy replicas run the goal's version and config, with no
    failure on record. The full plan would do nothing and say HEALTHY."""
    if (goal.deleted or len(replicas) != goal.target or failures.count
            or failures.incident or failures.token != goal.token):
        return False
    ranks = 0
    for r in replicas:
        if (r.state != RUNNING or r.failure or r.health_failures
                or r.config_hash != goal.config_hash or not r.is_current(goal)
                or r.misplaced(goal.target) or not 0 <= r.rank < goal.target):
            return False
        ranks |= 1 << r.rank
    return ranks == (1 << goal.target) - 1  # each of 0..n-1 once


def plan_deployment(goal: Goal | None, replicas: list[ReplicaView],
                    failures: StartupFailures, now: float
                    ) -> tuple[Plan, StartupFailures]:
    """The plan for one deployment, and its failure record after the plan."""
    if goal is not None and _settled(goal, replicas, failures):
        return Plan(status=status_pb2.DEPLOYMENT_STATUS_HEALTHY), failures
    plan = Plan()
    active = [r for r in replicas if r.state != STOPPING]
    broken = [r for r in active if r.failure]
    plan.stop.extend(r.replica_id for r in broken)
    healthy = [r for r in active if not r.failure]

    if goal is None or goal.deleted:
        plan.stop.extend(r.replica_id for r in healthy)
        plan.status = status_pb2.DEPLOYMENT_STATUS_UPDATING
        plan.message = f"deleting: {len(replicas)} replicas left to stop"
        return plan, failures

    failures = failures.for_goal(goal)
    current: list[ReplicaView] = []
    old: list[ReplicaView] = []
    for r in healthy:
        (current if r.is_current(goal) else old).append(r)
    running = [r for r in current if r.state == RUNNING]
    pending = [r for r in current if r.state != RUNNING]
    old_running = [r for r in old if r.state == RUNNING]

    # 1. Start what is missing, within the rollout and failure budgets.
    missing = goal.target - len(current)
    exhausted = failures.gave_up(goal)
    if missing > 0 and not exhausted and now >= failures.next_attempt_at:
        if old:
            budget = max(1, int(ROLLOUT_FRACTION * goal.target)) - len(pending)
            missing = min(missing, max(0, budget))
        used = {r.slot for r in current}
        free = (s for s in range(goal.target + len(current)) if s not in used)
        plan.start_slots = [next(free) for _ in range(missing)]

    # 2. Stop surplus current replicas: not-running ones first, then high slots.
    surplus = len(current) - goal.target
    if surplus > 0:
        order = _by_slot_desc(pending) + _by_slot_desc(running)
        plan.stop.extend(r.replica_id for r in order[:surplus])
    stopped = set(plan.stop)

    # 3. Retire old replicas without dropping below the target of RUNNING ones.
    # Old replicas still STARTING serve nothing and go at once; RECOVERING ones
    # (found after a failover, not yet probed) may be serving and are left
    # alone until their probe says what they are.
    plan.stop.extend(r.replica_id for r in old if r.state == STARTING)
    serving = len([r for r in running if r.replica_id not in stopped]) + len(old_running)
    can_stop = max(0, serving - goal.target)
    plan.stop.extend(r.replica_id for r in _by_slot_desc(old_running)[:can_stop])

    # 4. Reconfigure running current replicas in place.
    plan.reconfigure = [r.replica_id for r in running
                        if r.replica_id not in stopped and (
                            r.config_hash != goal.config_hash or r.misplaced(goal.target))]

    failures = _set_status(plan, goal, current, running, old, broken, failures, exhausted)
    # 5. Settled: ranks become 0..n-1 again.
    if plan.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY:
        plan.rerank = compacted({r.replica_id: r.rank for r in running}, goal.target)
        plan.reconfigure.extend(i for i in plan.rerank if i not in plan.reconfigure)
    return plan, failures


def quiet(plan: Plan, replicas: Iterable[ReplicaView]) -> bool:
    """Whether a deployment needs nothing until something happens to it: its
    plan does nothing and says HEALTHY, and every replica runs without failure."""
    return (plan.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY and not (
        plan.start_slots or plan.stop or plan.reconfigure)
        and all(r.state == RUNNING and not r.failure for r in replicas))


def _set_status(plan: Plan, goal: Goal, current: list[ReplicaView], running: list[ReplicaView],
                old: list[ReplicaView], broken: list[ReplicaView], failures: StartupFailures,
                exhausted: bool) -> StartupFailures:
    """Fill in the plan's status; the failure record, with a settled incident cleared."""
    # Replicas found running after a failover (RECOVERING, not probed yet)
    # serve as before it: the status does not flip to UPDATING for them.
    up = len(running) + sum(r.state == RECOVERING for r in current)
    if failures.count and not up and not any(r.state in (RUNNING, RECOVERING) for r in old):
        plan.start_error = failures.last_error
    if exhausted:
        plan.status = (status_pb2.DEPLOYMENT_STATUS_UNHEALTHY if up
                       else status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED)
        plan.message = (f"replicas failed to start {failures.count} times in a row; "
                        f"not retrying until the deployment changes. Last error: "
                        f"{failures.last_error}")
        return failures
    settled = up == goal.target and len(current) == goal.target and not old and not broken
    unhealthy = [r for r in broken if not r.failed_starting] + [
        r for r in current if r.health_failures and not r.failure]
    if unhealthy or (failures.incident and not settled):
        plan.status = status_pb2.DEPLOYMENT_STATUS_UNHEALTHY
        plan.message = "; ".join(f"replica {r.replica_id}: {r.failure or r.message}"
                                 for r in unhealthy) or failures.incident
        return failures
    if settled:
        plan.status = status_pb2.DEPLOYMENT_STATUS_HEALTHY
        plan.message = ""
        return failures.with_incident("")
    plan.status = status_pb2.DEPLOYMENT_STATUS_UPDATING
    parts = [f"{up} of {goal.target} replicas running version {goal.version}"]
    if old:
        parts.append(f"{len(old)} of an older version")
    if failures.count:
        parts.append(f"{failures.count} failed starts of at most {retry_cap(goal.target)}, "
                     f"last: {failures.last_error}")
    plan.message = "; ".join(parts)
    return failures
