"""What to do with one deployment's replicas: pure decisions, no I/O.

`plan_deployment(goal, replicas, failures, now)` looks at the goal and the
replicas as last observed and returns a `Plan`: the slots to start, the
replicas to stop and to reconfigure, and the deployment's status. The
reconciler (reconciler.py) carries the plan out. Everything here runs under
a fake clock in tests/test_planner.py.

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
  replicas whose applied config differs are reconfigured in place.
- Failures: a replica that failed (startup error, died, 3 failed health
  checks in a row) is stopped and replaced. Startup failures back off
  exponentially and stop after min(3 x target, 20) attempts for the same
  goal: the deployment is then DEPLOY_FAILED (UNHEALTHY if some replicas of
  the goal run), and no more starts are tried until the goal changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from servefleet.v1 import replica_pb2, status_pb2

DS = status_pb2.DeploymentStatus
# Plain ints: enum attribute lookups on the generated wrapper cost more than
# the rest of a plan (the tick benchmark showed it).
STARTING = replica_pb2.REPLICA_STATE_STARTING
RUNNING = replica_pb2.REPLICA_STATE_RUNNING
STOPPING = replica_pb2.REPLICA_STATE_STOPPING
RECOVERING = replica_pb2.REPLICA_STATE_RECOVERING

HEALTH_FAILURE_THRESHOLD = 3
MAX_STARTUP_RETRIES = 20
BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 16.0
ROLLOUT_FRACTION = 0.2


@dataclass(frozen=True)
class Goal:
    """What the deployment's record asks for."""

    version: str
    code_hash: str
    target: int
    # Digest of the fields applied by Reconfigure (user_config, max_ongoing_requests).
    config_hash: str
    deleted: bool = False

    @property
    def token(self) -> tuple[str, str, str, int]:
        """Changes whenever the goal does: resets the startup-failure count."""
        return (self.version, self.code_hash, self.config_hash, self.target)


@dataclass
class ReplicaView:
    """One replica as the controller last observed it (soft state)."""

    replica_id: str
    slot: int
    version: str
    code_hash: str
    state: int = STARTING
    # The config_hash it runs; "" until known.
    config_hash: str = ""
    health_failures: int = 0
    # Set when it failed: the reason, and whether it failed while starting.
    failure: str = ""
    failed_starting: bool = False
    message: str = ""

    def is_current(self, goal: Goal) -> bool:
        return self.version == goal.version and self.code_hash == goal.code_hash


@dataclass
class StartupFailures:
    """Startup failures of one deployment for its current goal (policy state)."""

    token: tuple = ()
    count: int = 0
    last_error: str = ""
    next_attempt_at: float = 0.0
    # Why a running replica was last replaced (failed health checks, exited);
    # the deployment shows UNHEALTHY with it until it is back at its target.
    incident: str = ""

    def reset_if_goal_changed(self, goal: Goal) -> None:
        if goal.token != self.token:
            self.token, self.count, self.last_error, self.next_attempt_at = goal.token, 0, "", 0.0

    def record(self, error: str, now: float) -> None:
        self.count += 1
        self.last_error = error
        self.next_attempt_at = now + min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (self.count - 1))

    def delay(self, now: float, seconds: float = 1.0) -> None:
        """Hold off the next start without counting a failure (e.g. a port collision)."""
        self.next_attempt_at = max(self.next_attempt_at, now + seconds)

    def record_success(self) -> None:
        self.count, self.next_attempt_at = 0, 0.0


def retry_cap(target: int) -> int:
    return max(1, min(3 * target, MAX_STARTUP_RETRIES))


@dataclass
class Plan:
    start_slots: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    reconfigure: list[str] = field(default_factory=list)
    status: int = status_pb2.DEPLOYMENT_STATUS_UPDATING
    message: str = ""


def _by_slot_desc(views: list[ReplicaView]) -> list[ReplicaView]:
    return sorted(views, key=lambda v: (v.slot, v.replica_id), reverse=True)


def plan_deployment(goal: Goal | None, replicas: list[ReplicaView],
                    failures: StartupFailures, now: float) -> Plan:
    plan = Plan()
    active = [r for r in replicas if r.state != STOPPING]
    broken = [r for r in active if r.failure]
    plan.stop.extend(r.replica_id for r in broken)
    healthy = [r for r in active if not r.failure]

    if goal is None or goal.deleted:
        plan.stop.extend(r.replica_id for r in healthy)
        plan.status = status_pb2.DEPLOYMENT_STATUS_UPDATING
        plan.message = f"deleting: {len(replicas)} replicas left to stop"
        return plan

    failures.reset_if_goal_changed(goal)
    current = [r for r in healthy if r.is_current(goal)]
    old = [r for r in healthy if not r.is_current(goal)]
    running = [r for r in current if r.state == RUNNING]
    pending = [r for r in current if r.state != RUNNING]
    old_running = [r for r in old if r.state == RUNNING]

    # 1. Start what is missing, within the rollout and failure budgets.
    missing = goal.target - len(current)
    exhausted = failures.count >= retry_cap(goal.target)
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
                        if r.replica_id not in stopped and r.config_hash != goal.config_hash]

    _set_status(plan, goal, current, running, old, broken, failures, exhausted)
    return plan


def _set_status(plan: Plan, goal: Goal, current: list[ReplicaView], running: list[ReplicaView],
                old: list[ReplicaView], broken: list[ReplicaView], failures: StartupFailures,
                exhausted: bool) -> None:
    up = len(running)
    if exhausted:
        plan.status = (status_pb2.DEPLOYMENT_STATUS_UNHEALTHY if up
                       else status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED)
        plan.message = (f"replicas failed to start {failures.count} times in a row; "
                        f"not retrying until the deployment changes. Last error: "
                        f"{failures.last_error}")
        return
    settled = up == goal.target and len(current) == goal.target and not old and not broken
    unhealthy = [r for r in broken if not r.failed_starting] + [
        r for r in current if r.health_failures and not r.failure]
    if unhealthy or (failures.incident and not settled):
        plan.status = status_pb2.DEPLOYMENT_STATUS_UNHEALTHY
        plan.message = "; ".join(f"replica {r.replica_id}: {r.failure or r.message}"
                                 for r in unhealthy) or failures.incident
        return
    if settled:
        failures.incident = ""
        plan.status = status_pb2.DEPLOYMENT_STATUS_HEALTHY
        plan.message = ""
        return
    plan.status = status_pb2.DEPLOYMENT_STATUS_UPDATING
    parts = [f"{up} of {goal.target} replicas running version {goal.version}"]
    if old:
        parts.append(f"{len(old)} of an older version")
    if failures.count:
        parts.append(f"{failures.count} failed starts, last: {failures.last_error}")
    plan.message = "; ".join(parts)
