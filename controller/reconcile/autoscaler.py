"""The autoscale reconciler: each autoscaled deployment's target follows its load.

A reconciler on the generic loop (loop.py), keyed by deployment. Each pass,
for each live deployment with an autoscaling_config, it samples the load the
proxies and handles report (load_reports.py) into the deployment's window
(load_window.py), asks the policy (autoscale.py) with the window's aggregate
and the replicas running, and when the target changes stores the decision in
the deployment record (a fenced write: the record is hard state, so a new
leader goes on from it). The replica reconciler then starts or stops
replicas toward the new target like after any deploy.

For its first WARMUP_S a term decides nothing: the reports that a new leader
needs arrive within one report period, and until then "no report" would read
as "no load".

A custom policy runs in a process of its own (policy_process.py). Its start
and each call are work on the loop, off the pass: a pass decides with the
policy's latest answer (to the previous pass's context) and asks it again
with this pass's. Until the first answer the target stays; when the policy
fails (cannot load, raises, hangs, exits) the built-in policy decides and
the status says why. A runner that could not start or died is started
again with the loop's backoff.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from servefleet.v1 import records_pb2

from ..clock import Clock
from ..errors import one_line
from ..goals.deployments import DeploymentTable
from ..goals.spec import target_replicas
from ..load_reports import LoadReports
from ..load_window import LoadWindow
from ..runtime.sandbox import Sandbox
from .autoscale import (
    AutoscalingContext,
    CustomPolicy,
    Decision,
    PolicyFailed,
    context_of,
    evaluate,
)
from .loop import BACKOFF, ReconcileLoop
from .policy_process import PolicyProcess
from .visits import FULL_PASS_S

logger = logging.getLogger(__name__)
DKey = tuple[str, str]
WARMUP_S = 2.0


class AutoscaleReconciler:
    name = "autoscale"

    def __init__(self, table: DeploymentTable, load: LoadReports, loop: ReconcileLoop,
                 clock: Clock, running: Callable[[DKey], int]) -> None:
        self._table, self._load, self._loop, self._clock = table, load, loop, clock
        self._running = running  # replicas RUNNING now, from the observed state
        self._started = clock.monotonic()
        self._windows: dict[DKey, LoadWindow] = {}
        self._decisions: dict[DKey, Decision] = {}
        self._records: dict[DKey, records_pb2.DeploymentRecord] = {}
        self._stale, self._next_read = True, 0.0  # goals_changed
        # Custom policies' runner processes, by deployment.
        self._policies: dict[DKey, _Policy] = {}
        # Who custom policies run as (runtime/sandbox.py); whether they run at
        # all (False under --runtime none: a stored one gives way to the built-in).
        self.sandbox = Sandbox()
        self.runs_code = True

    def decision(self, key: DKey) -> Decision | None:
        """The last decision for `key` (for the status), if it is autoscaled."""
        return self._decisions.get(key)

    def goals_changed(self) -> None:
        """A deployment's record changed: the next pass reads the table again
        (else only every FULL_PASS_S: reading it is the pass's O(deployments) part)."""
        self._stale = True

    async def begin_pass(self, now: float) -> None:
        if not self._stale and now < self._next_read:
            return
        self._stale, self._next_read = False, now + FULL_PASS_S
        self._records = {(r.spec.application, r.spec.name): r for r in self._table.live()
                         if r.spec.replica_config.HasField("autoscaling_config")}
        for gone in (set(self._decisions) | set(self._policies)) - set(self._records):
            self._decisions.pop(gone, None)
            self._windows.pop(gone, None)
            self._drop_policy(gone)

    def keys(self) -> Iterable[DKey]:
        return self._records.keys()

    def reconcile(self, key: DKey, now: float) -> None:
        record = self._records[key]
        config = record.spec.replica_config.autoscaling_config
        window = self._windows.setdefault(key, LoadWindow())
        total = self._load.total(*key)
        if window.latest() != total:
            window.add(now, total)
        if self._loop.busy(("autoscale", key)):
            return  # the last decision is being written
        stored = target_replicas(record)
        decision = self._decisions.get(key)
        if decision is None:
            decision = Decision(stored, since=now, changed_at=now)
        elif decision.target != stored:  # a redeploy clamped it, or a write is pending
            decision = replace(decision, target=stored)
        if now - self._started < WARMUP_S:
            self._decisions[key] = decision
            return
        load = window.aggregate(now, config.look_back_period_s, config.aggregation_function)
        if decision.target == 0 and total > 0:
            load = max(load or 0.0, total)  # a request waits now: no averaging it away
        custom: CustomPolicy | None = None
        policy = self._policy(key, record) if self.runs_code else None
        if config.policy and not self.runs_code:  # --runtime none: no user code here
            custom = _not_here
        elif policy is not None:
            if load is not None:
                policy.ask(self._loop, key, context_of(config, decision, load, self._running(key),
                                                       now, *key))
            custom = policy.function()
            if custom is None:  # loading, or no answer yet: keep the target
                self._decisions[key] = decision
                return
        after = evaluate(config, decision, load, self._running(key), now,
                         application=key[0], deployment=key[1], custom=custom)
        self._decisions[key] = after
        if after.target != stored:
            self._loop.spawn(("autoscale", key), lambda: self._store(key, after))

    def _policy(self, key: DKey, record: records_pb2.DeploymentRecord) -> _Policy | None:
        """The deployment's custom policy (None for the built-in one); its
        runner is started when the policy or its files change, or after it died."""
        policy = record.spec.replica_config.autoscaling_config.policy
        if not policy:
            self._drop_policy(key)
            return None
        runtime = record.spec.runtime
        identity = f"{policy}@{runtime.working_dir}#{runtime.working_dir_digest}"
        state = self._policies.get(key)
        if state is None or state.identity != identity:
            self._drop_policy(key)
            state = self._policies[key] = _Policy(identity, PolicyProcess(
                policy, runtime.working_dir, runtime.env, self.sandbox), self._clock)
        if not state.running and self._clock.monotonic() >= state.retry_at:
            self._loop.spawn(("policy", key), state.start)
        return state

    def _drop_policy(self, key: DKey) -> None:
        state = self._policies.pop(key, None)
        if state is not None:
            self._loop.spawn(("policy-stop", state.identity), state.process.close)

    async def close(self) -> None:
        """Stop every policy runner (the term is over)."""
        for state in self._policies.values():
            await state.process.close()
        self._policies.clear()

    async def _store(self, key: DKey, decision: Decision) -> None:
        if await self._table.set_autoscale(key, decision.target, decision.reason):
            logger.info("autoscaling %s/%s: %s", *key, decision.reason)

    def end_pass(self, now: float) -> None:
        pass


class _Policy:
    """A deployment's custom policy: its runner, its last answer or failure."""

    def __init__(self, identity: str, process: PolicyProcess, clock: Clock) -> None:
        self.identity = identity
        self.process = process
        self._clock = clock
        self.running = False  # started and loaded
        self.answer: float | None = None
        self.failure = ""  # why it gives no count now ("" when it does)
        # Starts that failed in a row, and when the next may be tried.
        self._failed_starts = 0
        self.retry_at = 0.0

    async def start(self) -> None:
        try:
            await self.process.start()
        except PolicyFailed as e:
            self.failure = str(e)
            self._failed_starts += 1
            self.retry_at = self._clock.monotonic() + BACKOFF.delay(self._failed_starts)
            logger.warning("autoscaling: %s", one_line(str(e), 1000))
            return
        self.running, self.failure, self._failed_starts = True, "", 0

    def ask(self, loop: ReconcileLoop, key: DKey, context: AutoscalingContext) -> None:
        """Ask for a count for `context` (one call at a time), for the next pass."""
        if not self.running:
            return

        async def call() -> None:
            try:
                self.answer, self.failure = await self.process.decide(context), ""
            except PolicyFailed as e:
                self.failure = str(e)
                if self.process.pid is None:  # hung or died: start again (backing off)
                    self.running = False
                    self._failed_starts += 1
                    self.retry_at = self._clock.monotonic() + BACKOFF.delay(
                        self._failed_starts)
                    logger.warning("autoscaling %s/%s: %s", *key, one_line(str(e), 1000))

        loop.spawn(("policy-call", key), call)

    def function(self) -> CustomPolicy | None:
        """The policy as the pure evaluation calls it: its last answer, or
        PolicyFailed; None while there is neither."""
        if self.failure:
            failure = self.failure

            def failed(context: AutoscalingContext) -> float:
                raise PolicyFailed(failure)
            return failed
        if self.answer is None:
            return None
        answer = self.answer
        return lambda context: answer



def _not_here(context: AutoscalingContext) -> float:
    """A stored custom policy on a controller that runs no user code: reported,
    and the built-in policy decides."""
    raise PolicyFailed("custom policies do not run here: this controller runs no user code "
                       "(--runtime none)")
