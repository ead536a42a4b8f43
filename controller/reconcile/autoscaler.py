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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from servefleet.v1 import records_pb2

from ..clock import Clock
from ..goals.deployments import DeploymentTable
from ..goals.spec import target_replicas
from ..load_reports import LoadReports
from ..load_window import LoadWindow
from .autoscale import CustomPolicy, Decision, evaluate
from .loop import ReconcileLoop
from .policy_loader import load_policy

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
        # Custom policies: (what was loaded, the function or None, why not).
        self._policies: dict[DKey, tuple[str, CustomPolicy | None, str]] = {}

    def decision(self, key: DKey) -> Decision | None:
        """The last decision for `key` (for the status), if it is autoscaled."""
        return self._decisions.get(key)

    async def begin_pass(self, now: float) -> None:
        self._records = {(r.spec.application, r.spec.name): r for r in self._table.live()
                         if r.spec.replica_config.HasField("autoscaling_config")}
        for gone in (set(self._decisions) | set(self._policies)) - set(self._records):
            self._decisions.pop(gone, None)
            self._windows.pop(gone, None)
            self._policies.pop(gone, None)

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
        ready, custom, error = self._policy(key, record)
        if not ready or error:  # loading, or it cannot be: keep the target (and say why)
            self._decisions[key] = replace(decision, error=error)
            return
        load = window.aggregate(now, config.look_back_period_s, config.aggregation_function)
        if decision.target == 0 and total > 0:
            load = max(load or 0.0, total)  # a request waits now: no averaging it away
        after = evaluate(config, decision, load, self._running(key), now,
                         application=key[0], deployment=key[1], custom=custom)
        self._decisions[key] = after
        if after.target != stored:
            self._loop.spawn(("autoscale", key), lambda: self._store(key, after))

    def _policy(self, key: DKey, record: records_pb2.DeploymentRecord
                ) -> tuple[bool, CustomPolicy | None, str]:
        """(ready, the deployment's custom policy or None for the built-in one,
        why it cannot be loaded); a load is spawned when the policy or its
        files change, and until it ends the policy is not ready."""
        policy = record.spec.replica_config.autoscaling_config.policy
        if not policy:
            return True, None, ""
        runtime = record.spec.runtime
        identity = f"{policy}@{runtime.working_dir}#{runtime.working_dir_digest}"
        loaded = self._policies.get(key)
        if loaded is not None and loaded[0] == identity:
            return True, loaded[1], loaded[2]
        self._loop.spawn(("policy", key), lambda: self._load_policy(key, identity, policy,
                                                                  runtime.working_dir))
        return False, None, ""

    async def _load_policy(self, key: DKey, identity: str, policy: str,
                           working_dir: str) -> None:
        try:
            function = await asyncio.to_thread(load_policy, policy, working_dir)
        except Exception as e:  # the user's code: whatever its import raises
            error = f"custom policy {policy} cannot be loaded: {type(e).__name__}: {e}"
            logger.warning("autoscaling %s/%s: %s", *key, error)
            self._policies[key] = (identity, None, error)
        else:
            self._policies[key] = (identity, function, "")

    async def _store(self, key: DKey, decision: Decision) -> None:
        if await self._table.set_autoscale(key, decision.target, decision.reason):
            logger.info("autoscaling %s/%s: %s", *key, decision.reason)

    def end_pass(self, now: float) -> None:
        pass
