"""The autoscaling policy: how many replicas a deployment's load asks for. Pure.

Ray Serve's rules (its autoscaling_policy.py), so that its users' configs
carry over:

- The load is the requests ongoing at the deployment's replicas plus those
  queued for it at proxies and handles, combined over the last
  `look_back_period_s` by `aggregation_function` (load_reports.py).
- Desired replicas: load / target_ongoing_requests. From the R replicas
  running, one step goes toward it, scaled by `upscaling_factor` or
  `downscaling_factor`: ceil(R + factor * (desired - R)). A step that rounds
  back to R while fewer are wanted goes one down instead, so that a small
  factor still reaches the bottom. With nothing running the step is
  ceil(desired). The result is clamped to [min_replicas, max_replicas].
- A change is made only once the desired count has stayed on the same side
  of the current target for `upscale_delay_s` (up) or `downscale_delay_s`
  (down); the step from one replica to none waits
  `downscale_to_zero_delay_s`. A scale-down keeps at least one replica; only
  that last step goes to zero. Whenever desired meets the target or changes
  side, the wait starts again.
- From zero, any load scales up at once, to max(1, ceil(upscaling_factor)):
  a request is waiting for a replica.
- A custom policy (`policy: "module:function"`) replaces the desired-count
  step: it gets an AutoscalingContext and returns a count. Clamping, the
  delays and the start from zero apply to its answer as to the built-in
  one. If it fails (raises, hangs, its process dies: policy_process.py),
  the built-in policy decides instead and the error is kept for the status.

`evaluate` is called once per reconcile pass per autoscaled deployment with
the aggregated load (None while no load figure exists, e.g. just after a
failover: nothing changes then). Its `Decision.target` is hard state (the
deployment record); the rest is rebuilt after a failover.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from servefleet.v1 import deployment_pb2


@dataclass(frozen=True, slots=True)
class AutoscalingContext:
    """What a custom policy is told; it must not keep or change it."""

    application: str
    deployment: str
    current_replicas: int  # running now
    target_replicas: int  # the current decision
    load: float  # ongoing + queued requests, aggregated over the look-back window
    config: deployment_pb2.AutoscalingConfig  # a copy
    seconds_since_last_change: float


CustomPolicy = Callable[[AutoscalingContext], float]


class PolicyFailed(Exception):
    """A custom policy gave no count; the message says why, for the status."""


@dataclass(frozen=True, slots=True)
class Decision:
    target: int
    # The side (+1 up, -1 down, 0 none) the desired count has been on since `since`.
    leaning: int = 0
    since: float = 0.0
    changed_at: float = 0.0
    load: float = 0.0  # the aggregated load of the last evaluation
    desired: int = 0  # what that load asked for, clamped
    reason: str = ""  # why the target last changed
    error: str = ""  # the custom policy's last failure, "" when it answered


def clamp(config: deployment_pb2.AutoscalingConfig, count: int) -> int:
    return max(config.min_replicas, min(config.max_replicas, count))


def desired_replicas(config: deployment_pb2.AutoscalingConfig, load: float,
                     running: int) -> int:
    """The built-in policy's count for `load` with `running` replicas, clamped."""
    wanted = load / config.target_ongoing_requests
    if running == 0:
        return clamp(config, math.ceil(wanted))
    factor = config.upscaling_factor if wanted > running else config.downscaling_factor
    step = math.ceil(running + factor * (wanted - running))
    if step == running and math.ceil(wanted) < running:
        step -= 1
    return clamp(config, step)


def context_of(config: deployment_pb2.AutoscalingConfig, decision: Decision, load: float,
               running: int, now: float, application: str, deployment: str
               ) -> AutoscalingContext:
    """What a custom policy is asked with."""
    copy = deployment_pb2.AutoscalingConfig()
    copy.CopyFrom(config)
    return AutoscalingContext(application, deployment, running, decision.target, load, copy,
                              now - decision.changed_at)


def _asked(config: deployment_pb2.AutoscalingConfig, decision: Decision, load: float,
           running: int, now: float, application: str, deployment: str,
           custom: CustomPolicy | None) -> tuple[int, str]:
    """The clamped desired count and the custom policy's error ("" if none);
    the built-in policy's count when the custom one fails."""
    if custom is None:
        return desired_replicas(config, load, running), ""
    context = context_of(config, decision, load, running, now, application, deployment)
    try:
        answer = float(custom(context))
        if not math.isfinite(answer) or answer < 0:
            raise ValueError(f"returned {answer!r}; expected a replica count >= 0")
    except Exception as e:  # the user's code: anything it raises is its failure
        error = str(e) if isinstance(e, PolicyFailed) else \
            f"custom policy {config.policy}: {type(e).__name__}: {e}"
        return desired_replicas(config, load, running), error
    return clamp(config, math.ceil(answer)), ""


def evaluate(config: deployment_pb2.AutoscalingConfig, decision: Decision,
             load: float | None, running: int, now: float, *, application: str = "",
             deployment: str = "", custom: CustomPolicy | None = None) -> Decision:
    """The decision after one look at the deployment's load."""
    if load is None:
        return decision
    target = decision.target
    if target == 0 and load > 0:
        start = clamp(config, max(1, math.ceil(config.upscaling_factor)))
        return Decision(start, changed_at=now, load=load, desired=start,
                        reason=f"scaled from zero to {start}: {load:g} requests waiting")
    desired, error = _asked(config, decision, load, running, now, application, deployment,
                            custom)
    seen = replace(decision, load=load, desired=desired, error=error)
    leaning = (desired > target) - (desired < target)
    if leaning == 0:
        return replace(seen, leaning=0, since=now)
    if leaning != decision.leaning:
        seen = replace(seen, leaning=leaning, since=now)
    if leaning > 0:
        delay, new = config.upscale_delay_s, desired
    elif target == 1 and desired == 0:
        delay, new = config.downscale_to_zero_delay_s, 0
    else:
        delay, new = config.downscale_delay_s, max(1, desired)
    if now - seen.since < delay or new == target:
        return seen
    per = config.target_ongoing_requests
    # Still short of the desired count (the last replica waits apart): the next
    # wait is counted from this change.
    still = leaning if new != desired else 0
    return replace(seen, target=new, leaning=still, since=now, changed_at=now,
                   reason=f"{'up' if new > target else 'down'} from {target} to {new}: "
                          f"load {load:g} for {per:g} per replica asked for {desired} "
                          f"for {now - seen.since:.1f} s")
