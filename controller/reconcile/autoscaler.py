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

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from servefleet.v1 import records_pb2

from ..clock import Clock
from ..goals.deployments import DeploymentTable
from ..goals.spec import target_replicas
from ..load_reports import LoadReports
from ..load_window import LoadWindow
from .autoscale import Decision, evaluate
from .loop import ReconcileLoop

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

    def decision(self, key: DKey) -> Decision | None:
        """The last decision for `key` (for the status), if it is autoscaled."""
        return self._decisions.get(key)

    async def begin_pass(self, now: float) -> None:
        self._records = {(r.spec.application, r.spec.name): r for r in self._table.live()
                         if r.spec.replica_config.HasField("autoscaling_config")}
        for gone in set(self._decisions) - set(self._records):
            self._decisions.pop(gone, None)
            self._windows.pop(gone, None)

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
        after = evaluate(config, decision, load, self._running(key), now,
                         application=key[0], deployment=key[1])
        self._decisions[key] = after
        if after.target != stored:
            self._loop.spawn(("autoscale", key), lambda: self._store(key, after))

    async def _store(self, key: DKey, decision: Decision) -> None:
        if await self._table.set_autoscale(key, decision.target, decision.reason):
            logger.info("autoscaling %s/%s: %s", *key, decision.reason)

    def end_pass(self, now: float) -> None:
        pass
