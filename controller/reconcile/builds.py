"""The build reconciler: every application's newest generation gets built and applied.

A reconciler on the generic loop (loop.py), keyed by application name. For
an application whose newest generation is pending (neither applied nor
failed, goals/applications.py), it spawns one build: the build step imports
the code in a process of its own (builder.py), app_specs.py turns the graph
into deployment specs, and the table applies them (or records the failure).
A newer generation cancels the build of an older one; a deleted application
has its deployments deleted. A build that raises (the store is down) is
retried by the loop with its backoff; a build that fails is recorded and
not retried until the next change. Losing leadership ends the loop, which
cancels the build (its process is killed with it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable

from servefleet._private.messages import error_summary
from servefleet.v1 import application_pb2 as apb

from ..errors import AlreadyExists, InvalidArgument, PermissionDenied, one_line
from ..goals.app_specs import deployment_specs
from ..goals.applications import ApplicationTable, pending
from .builder import BuildResult, run_build
from .loop import ReconcileLoop

logger = logging.getLogger(__name__)

Builder = Callable[[apb.ApplicationSpec], Awaitable[BuildResult]]


class BuildReconciler:
    name = "builds"

    def __init__(self, table: ApplicationTable, loop: ReconcileLoop,
                 build: Builder = run_build) -> None:
        self._table = table
        self._loop = loop
        self._build = build
        # The generation each application's build under way is for.
        self._generation: dict[str, int] = {}

    def building(self, name: str) -> bool:
        return self._loop.busy(("build", name))

    async def begin_pass(self, now: float) -> None:
        pass

    def keys(self) -> Iterable[str]:
        wanted = {r.spec.name for r in self._table.records() if pending(r)}
        return sorted(wanted | set(self._generation))

    def reconcile(self, name: str, now: float) -> None:
        work = ("build", name)
        record = self._table.record(name)
        if record is None or not pending(record) or self._table.closed:
            self._loop.cancel(work)  # superseded, applied, or shutting down
            self._generation.pop(name, None)
            return
        if self._generation.get(name) == record.generation and self._loop.busy(work):
            return
        if self._loop.spawn(work, lambda: self._settle(record), replace=True):
            self._generation[name] = record.generation

    def end_pass(self, now: float) -> None:
        pass

    async def _settle(self, record: apb.ApplicationRecord) -> None:
        name, generation = record.spec.name, record.generation
        if record.deleted:
            logger.info("application %s: deleting its deployments", name)
            await self._table.apply_build(name, generation, [])
            return
        if not self._table.runs_code:  # --runtime none: no user code on this host
            await self._table.fail_build(name, generation, "not built: this controller runs "
                                         "no user code (--runtime none)")
            return
        logger.info("application %s: building generation %d from %s", name, generation,
                    record.spec.import_path)
        result = await self._build(record.spec)
        if result.graph is None:
            logger.warning("application %s: the build failed: %s", name,
                           one_line(error_summary(result.error)))
            await self._table.fail_build(name, generation, result.error)
            return
        try:
            specs = deployment_specs(record.spec, result.graph)
            _warn_about_batches(name, specs, result.graph)
            await self._table.apply_build(name, generation, specs)
        except (InvalidArgument, AlreadyExists, PermissionDenied) as e:
            await self._table.fail_build(name, generation, e.message)


def _warn_about_batches(application: str, specs: list, graph: dict) -> None:
    """Batches never fill past max_ongoing_requests (servefleet/_private/batching/batch.py)."""
    sizes = {n["name"]: n.get("batch_sizes") or {} for n in graph.get("deployments") or []}
    for spec in specs:
        limit = spec.replica_config.max_ongoing_requests
        for method, size in sizes.get(spec.name, {}).items():
            if size > limit:
                logger.warning("application %s: %s.%s has @batch(max_batch_size=%d) but "
                               "max_ongoing_requests is %d: its batches never hold more than "
                               "%d calls", application, spec.name, method, size, limit, limit)
