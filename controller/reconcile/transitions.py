"""How one replica's observed state changes: pure functions of (view, observation, now).

The replica I/O (replica_ops.py) performs a start, a probe, a health check,
a reconfigure, a stop, or notices an exit, and returns one of the
observations below; it changes nothing itself. At the next pass the replica
reconciler hands each observation to `apply`, which returns an `Outcome`:
the replica's new view (or None once it is gone) and what its deployment's
startup-failure record must learn. `startup_deadline` is the one transition
that the clock alone causes. Nothing here does I/O or changes its arguments.

The rules:

- A replica that fails is marked failed (the planner stops and replaces it).
  A failure while STARTING counts toward the deployment's retry cap only when
  the replica runs the current goal and the failure is its own (not a port
  collision, not the store); other start failures only hold starts off
  briefly. A RUNNING replica that fails is an incident: the deployment is
  UNHEALTHY until it is back at its target.
- A probe that finds the replica ready makes it RUNNING (a success resets the
  failure count); one that finds a RECOVERING replica still loading makes it
  STARTING again; a FAILED phase is a failure.
- HEALTH_FAILURE_THRESHOLD failed health checks in a row are a failure; a
  passing check clears the count. A check made because proxies or handles
  stopped getting answers (a suspect's) that fails is a failure at once,
  unless no other replica of the deployment serves: replacing the last one
  on one check would leave nothing serving while the new one loads (and a
  busy replica, not a dead one, loses its model), so it counts like any
  other failed check.
- A replica STARTING for longer than the goal's startup_timeout_s is a
  counted failure, named with the timeout.
- Once a replica is STOPPING, only its `Stopped` observation still matters:
  whatever else arrives about it was decided before the stop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from servefleet.v1 import deployment_pb2, replica_pb2

from .planner import RECOVERING, RUNNING, STARTING, STOPPING, ReplicaView, StartupFailures

HEALTH_FAILURE_THRESHOLD = 3
MAX_REASON_CHARS = 2000


# -- observations: what the I/O saw -------------------------------------------------


@dataclass(frozen=True, slots=True)
class Started:
    """The runtime runs the replica; `record` has its handle and addresses."""

    record: replica_pb2.ReplicaRecord


@dataclass(frozen=True, slots=True)
class StartFailed:
    reason: str
    # False when it was not the replica's fault (the store, a port collision).
    counted: bool = True


@dataclass(frozen=True, slots=True)
class Probed:
    ready: bool = False
    # Non-empty when the replica failed (startup error, exited).
    failure: str = ""
    config_hash: str = ""
    bind_failure: bool = False
    # Alive and answering, but its constructor is still running.
    loading: bool = False
    # The (rank, world size) it runs with, when it reports one (ReplicaView.placed).
    placed: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class HealthChecked:
    problem: str = ""  # "" when healthy
    # Checked at once because proxies or handles ejected it (passive health):
    # a failure replaces it at once, not after HEALTH_FAILURE_THRESHOLD.
    suspect: bool = False


@dataclass(frozen=True, slots=True)
class Reconfigured:
    config_hash: str = ""
    error: str = ""  # the user's reconfigure error, or why the call failed
    # The (rank, world size) it was told, and its record as it stands (a new
    # rank is written to it first).
    placed: tuple[int, int] | None = None
    record: replica_pb2.ReplicaRecord | None = None


@dataclass(frozen=True, slots=True)
class Exited:
    reason: str
    bind_failure: bool = False


@dataclass(frozen=True, slots=True)
class Stopped:
    """The replica is stopped and its record deleted."""


Observation = Started | StartFailed | Probed | HealthChecked | Reconfigured | Exited | Stopped


# -- outcomes: what changed ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    view: ReplicaView | None  # None: the replica is gone
    # For the deployment's StartupFailures: a counted failed start (its reason),
    # a start held off without counting, a running replica's failure, a success.
    failed_start: str = ""
    hold_starts: bool = False
    incident: str = ""
    started: bool = False
    # Whether the set of replicas that take traffic changed.
    serving_changed: bool = False

    def changes_nothing(self, before: ReplicaView) -> bool:
        """Whether this outcome leaves `before` and its deployment as they were."""
        return self.view is before and self == Outcome(before)


def learned(failures: StartupFailures, outcome: Outcome, now: float) -> StartupFailures:
    """The deployment's failure record after one of its replicas' outcomes."""
    if outcome.failed_start:
        failures = failures.failed(outcome.failed_start, now)
    elif outcome.hold_starts:
        failures = failures.held(now)
    elif outcome.incident:
        failures = failures.with_incident(outcome.incident)
    return failures.succeeded() if outcome.started else failures


def serving(view: ReplicaView) -> bool:
    """Whether the replica takes traffic."""
    return view.state in (RUNNING, RECOVERING) and not view.failure


def fail(view: ReplicaView, reason: str, *, counted: bool, current: bool) -> Outcome:
    failed = replace(view, failure=reason, failed_starting=view.state in (STARTING, RECOVERING))
    if view.state == STARTING and counted and current:
        # The whole reason (a traceback, an exit code with the last output),
        # capped: it ends up in the deployment's status message.
        return Outcome(failed, failed_start=reason.strip()[-MAX_REASON_CHARS:])
    if view.state == STARTING:
        return Outcome(failed, hold_starts=True)
    incident = f"replica {view.replica_id} was replaced: {reason}" \
        if view.state == RUNNING else ""
    return Outcome(failed, incident=incident, serving_changed=serving(view))


def stopping(view: ReplicaView) -> Outcome:
    return Outcome(replace(view, state=STOPPING), serving_changed=serving(view))


def stop_timings(config: deployment_pb2.ReplicaConfig | None,
                 view: ReplicaView) -> tuple[float, float]:
    """(drain wait loop, graceful timeout) for stopping `view`: the goal's, or
    the defaults when the deployment is gone; a failed replica has nothing
    worth waiting for, so it gets at most 5 s."""
    wait_loop = config.graceful_shutdown_wait_loop_s if config else 2.0
    timeout = config.graceful_shutdown_timeout_s if config else 20.0
    return wait_loop, min(timeout, 5.0) if view.failure else timeout


def apply(view: ReplicaView, seen: Observation, *, current: bool, now: float,
          alone: bool = False) -> Outcome:
    """The replica after `seen`; `current`: it runs its deployment's goal;
    `alone`: no other replica of its deployment serves."""
    if isinstance(seen, Stopped):
        return Outcome(None, serving_changed=serving(view))
    if view.state == STOPPING or (view.failure and not isinstance(seen, Started)):
        return Outcome(view)  # decided already: a stop's (or a failure's) word is final
    if isinstance(seen, Started):
        return Outcome(view)
    if isinstance(seen, StartFailed):
        return fail(view, seen.reason, counted=seen.counted, current=current)
    if isinstance(seen, Exited):
        return fail(view, seen.reason, counted=not seen.bind_failure, current=current)
    if isinstance(seen, Probed):
        return _probed(view, seen, current, now)
    if isinstance(seen, HealthChecked):
        return _health_checked(view, seen, alone)
    if seen.error:
        return fail(replace(view, rank_recorded=_rank_recorded(view, seen.record)),
                    f"reconfigure failed: {seen.error}", counted=True, current=current)
    return Outcome(replace(view, config_hash=seen.config_hash,
                           placed=seen.placed if seen.placed is not None else view.placed,
                           rank_recorded=_rank_recorded(view, seen.record)))


def _rank_recorded(view: ReplicaView, record: replica_pb2.ReplicaRecord | None) -> bool:
    return view.rank_recorded or (record is not None and record.HasField("rank")
                                  and record.rank == view.rank)


def _probed(view: ReplicaView, seen: Probed, current: bool, now: float) -> Outcome:
    if seen.failure:
        return fail(view, seen.failure, counted=not seen.bind_failure, current=current)
    if seen.ready:
        return Outcome(replace(view, state=RUNNING, config_hash=seen.config_hash,
                               placed=seen.placed), started=current, serving_changed=True)
    if view.state == RECOVERING and seen.loading:
        # It was still starting when the old leader died.
        return Outcome(replace(view, state=STARTING, since=now), serving_changed=True)
    return Outcome(view)  # still loading: probed again on a later pass


def _health_checked(view: ReplicaView, seen: HealthChecked, alone: bool) -> Outcome:
    if view.state != RUNNING:
        return Outcome(view)
    if not seen.problem and seen.suspect:
        # Proxies and handles that ejected it hear that it answers again.
        return Outcome(replace(view, health_failures=0, message="", cleared=view.cleared + 1),
                       serving_changed=True)
    if not seen.problem:
        healthy = view.health_failures == 0 and not view.message
        return Outcome(view if healthy else replace(view, health_failures=0, message=""))
    count = view.health_failures + 1
    checked = replace(view, health_failures=count, message=seen.problem)
    why = " (checked because proxies stopped getting answers from it)" if seen.suspect else ""
    if seen.suspect and not alone:
        return fail(checked, seen.problem + why, counted=True, current=True)
    if count >= HEALTH_FAILURE_THRESHOLD:
        return fail(checked, f"{seen.problem} ({count} times in a row){why}", counted=True,
                    current=True)
    return Outcome(checked)


def startup_deadline(view: ReplicaView, now: float, timeout_s: float, *,
                     current: bool) -> Outcome | None:
    """A failed start if the replica has been STARTING for `timeout_s`; else None."""
    if view.state != STARTING or view.failure or now - view.since < timeout_s:
        return None
    return fail(view, f"the replica did not become ready within startup_timeout_s "
                      f"({timeout_s:g} s): its constructor may hang", counted=True,
                current=current)
