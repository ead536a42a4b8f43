"""Applications: their goals in the store, and the writes that carry out their builds.

One change of an application goes through three steps:

1. `deploy` (the DeployApplications RPC) validates every spec, stamps the
   digest of each working_dir's files into it (code_digest.py), then writes
   the changed records, each with its generation bumped, and the records of
   the applications to delete, in one fenced transaction, and returns (or,
   for a dry run, returns what it would write). `on_goal` is told, so that
   the build reconciler (reconcile/builds.py) looks at once.
2. The build reconciler builds the newest generation of each application
   that is `pending`: the build step imports the code in a process of its own
   (reconcile/builder.py) and reports the deployment graph.
3. `apply_build` turns the graph into deployment specs (app_specs.py) and
   writes them, the deletion of deployments the graph no longer has, and the
   record marked applied, in one transaction
   (DeploymentTable.apply_application); `fail_build` records why a build
   failed (shown as DEPLOY_FAILED until the next change).

Every write re-checks, under the table's lock, that its generation is still
the newest, so a build that a newer deploy superseded writes nothing. A new
leader's build reconciler settles every record whose applied generation is
behind, so a change acknowledged before a failover is still carried out.

A change of the traffic policy alone is not rebuilt: it is written and
applied at once (the proxies get it with the route table).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from google.protobuf.timestamp_pb2 import Timestamp

from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as dpb

from ..clock import Clock
from ..election import FencedStore
from ..errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from ..keys import ClusterKeys
from ..store import Delete, Op, Put, Store
from .app_specs import (
    check_http_options,
    check_request_bounds,
    check_traffic,
    check_traffic_targets,
    normalize_application,
    route_of,
)
from .code_digest import WorkingDirDigests
from .deployments import MAX_OPS_PER_TXN, DeploymentTable
from .mirror import StoreMirror
from .spec import check_name
from .stored import Unusable, load_application

logger = logging.getLogger(__name__)


def _without_traffic(spec: apb.ApplicationSpec) -> apb.ApplicationSpec:
    out = apb.ApplicationSpec()
    out.CopyFrom(spec)
    out.ClearField("traffic")
    return out


def pending(record: apb.ApplicationRecord) -> bool:
    """The newest generation is neither applied nor failed."""
    return record.generation not in (record.applied_generation, record.failed_generation)


class ApplicationTable:
    def __init__(self, keys: ClusterKeys, fenced: FencedStore, store: Store,
                 deployments: DeploymentTable, clock: Clock | None = None,
                 on_traffic: Callable[[str], None] | None = None,
                 on_goal: Callable[[], None] | None = None) -> None:
        self._keys = keys
        self._deployments = deployments
        self._clock = clock or Clock()
        # Told an application's name when its traffic policy changed.
        self._on_traffic = on_traffic or (lambda name: None)
        # Told when an application has a new generation to build (or delete).
        self._on_goal = on_goal or (lambda: None)
        self._records: dict[str, apb.ApplicationRecord] = {}
        # Stored records this term cannot use (stored.py), by name: status shows
        # them failed; deploying the name replaces them, deleting it removes them.
        self.unusable: dict[str, Unusable] = {}
        self.http_options = apb.HttpOptions()
        self._lock = asyncio.Lock()
        self._writes = StoreMirror(fenced, store, self.load)
        # Set by Shutdown (clear): no more writes or builds in this term.
        self.closed = False
        # False under --runtime none: nothing from a spec runs on this host, so
        # applications, which are built by importing their code, are refused.
        self.runs_code = True

    # -- loading and reads -------------------------------------------------------

    async def load(self, store: Store) -> None:
        records, unusable = {}, {}
        for kv in await store.list_prefix(self._keys.applications):
            record, problem = load_application(self._keys.applications, kv.key, kv.value)
            if problem is not None:  # set aside, never a poison pill (stored.py)
                logger.error("application %s", problem.message)
                unusable[problem.application] = problem
            elif record is not None:
                records[record.spec.name] = record
        options = apb.HttpOptions()
        stored = await store.get(self._keys.http_options)
        if stored is not None:
            options.ParseFromString(stored.value)
        self._records, self.http_options, self.unusable = records, options, unusable

    def records(self) -> list[apb.ApplicationRecord]:
        """Every application record, deleted ones still being cleaned up included."""
        return [r for _, r in sorted(self._records.items())]

    def live(self) -> list[apb.ApplicationRecord]:
        return [r for r in self.records() if not r.deleted]

    def spec(self, name: str) -> apb.ApplicationSpec | None:
        """The application's spec, or None. A deleted one's too, while its
        deployments are being removed: its routes keep their require_token
        (fail closed) and traffic policy until they are gone."""
        record = self._records.get(name)
        return record.spec if record is not None else None

    def owns(self, name: str) -> bool:
        """Whether `name` is an application deployed through DeployApplications."""
        record = self._records.get(name)
        return record is not None and not record.deleted

    def record(self, name: str) -> apb.ApplicationRecord | None:
        return self._records.get(name)

    # -- writes ---------------------------------------------------------------------

    async def _commit(self, ops: list[Op], updated: dict[str, apb.ApplicationRecord | None],
                      after: Callable[[], None] | None = None) -> None:
        """Write (store_mirror.py), then mirror in memory and run `after` (kicks,
        notifications) in the same shielded step, so a caller cancelled
        mid-write cannot leave a stored change that nothing acts on."""
        if self.closed:
            raise Unavailable("the controller is shutting down")

        def mirror() -> None:
            self._mirror(updated)
            if after is not None:
                after()

        await self._writes.write(ops, mirror)

    def _mirror(self, updated: dict[str, apb.ApplicationRecord | None]) -> None:
        for name, record in updated.items():
            self.unusable.pop(name, None)
            if record is None:
                self._records.pop(name, None)
            else:
                self._records[name] = record

    async def _refresh_if_stale(self) -> None:
        """After a write of unknown outcome: reload, and act on what did land."""
        if await self._writes.refresh_if_stale():
            self._on_goal()
            self._on_traffic("")

    def _stamp(self) -> Timestamp:
        stamp = Timestamp()
        stamp.FromNanoseconds(int(self._clock.time() * 1e9))
        return stamp

    def _put(self, record: apb.ApplicationRecord) -> Op:
        return Put(self._keys.application(record.spec.name), record.SerializeToString())

    async def deploy(self, request: api.DeployApplicationsRequest) -> tuple[list[str], list[str]]:
        """Store the applications asked for; returns (changed, deleted) names."""
        check_request_bounds(request)  # counts before any copy, file or hash
        specs = [normalize_application(s, f"applications[{i}]")
                 for i, s in enumerate(request.applications)]
        self._check_unique(specs)
        # The files under each working_dir are part of the spec, so that an
        # edited module is a change (and a rebuild) like an edited config.
        policy = self._deployments.policy
        for i, spec in enumerate(specs):  # all checked before any tree is hashed
            policy.check_application(f"applications[{i}]", spec)
        if specs and not self.runs_code:
            raise FailedPrecondition("this controller runs no user code (--runtime none), and "
                                     "an application is built by importing its code: give "
                                     "the controller a runtime, or deploy the deployments "
                                     "themselves with Deploy")
        digests = WorkingDirDigests(policy.not_code)
        for i, spec in enumerate(specs):
            await digests.stamp(spec.runtime, f"applications[{i}].runtime")
            for j, override in enumerate(spec.deployments):
                await digests.stamp(override.runtime,
                                    f"applications[{i}].deployments[{j}].runtime")
        if request.HasField("http_options"):
            check_http_options(request.http_options)
        async with self._lock:
            await self._refresh_if_stale()
            listed = {s.name for s in specs}
            remove = [] if request.partial else [
                n for n, r in self._records.items() if not r.deleted and n not in listed]
            for i, spec in enumerate(specs):
                route = route_of(spec)
                owner = self._deployments.route_owner(route, listed | set(remove)) \
                    if route is not None else None
                if owner is not None:
                    raise AlreadyExists(f"applications[{i}].route_prefix: {route!r} is already "
                                        f"served by deployment {owner[0]}/{owner[1]}")
            updated: dict[str, apb.ApplicationRecord | None] = {}
            for spec in specs:
                record = self._changed(spec)
                if record is not None:
                    updated[spec.name] = record
            for name in remove:
                record = self._next(self._records[name], self._records[name].spec)
                record.deleted = True
                updated[name] = record
            ops = [self._put(r) for r in updated.values() if r is not None]
            if request.HasField("http_options") and request.http_options != self.http_options:
                ops.append(Put(self._keys.http_options, request.http_options.SerializeToString()))
            if len(ops) > MAX_OPS_PER_TXN:
                raise InvalidArgument("applications", f"at most {MAX_OPS_PER_TXN} applications "
                                      "change in one request")
            http_changed = (request.HasField("http_options")
                            and request.http_options != self.http_options)

            def after() -> None:
                if http_changed:
                    self.http_options.CopyFrom(request.http_options)
                self._on_goal()
                # Traffic policies and request_timeout_s travel with the route table.
                self._on_traffic("")

            if ops and not request.dry_run:
                await self._commit(ops, updated, after)
        changed = sorted(n for n in updated if n in listed)
        return changed, sorted(remove)

    @staticmethod
    def _check_unique(specs: list[apb.ApplicationSpec]) -> None:
        names: dict[str, int] = {}
        routes: dict[str, str] = {}
        for i, spec in enumerate(specs):
            if spec.name in names:
                raise InvalidArgument(f"applications[{i}].name",
                                      f"{spec.name!r} is also applications[{names[spec.name]}]")
            names[spec.name] = i
            route = route_of(spec)
            if route is not None and route in routes:
                raise InvalidArgument(f"applications[{i}].route_prefix",
                                      f"{route!r} is also the route of application "
                                      f"{routes[route]}")
            if route is not None:
                routes[route] = spec.name

    def _next(self, current: apb.ApplicationRecord, spec: apb.ApplicationSpec
              ) -> apb.ApplicationRecord:
        record = apb.ApplicationRecord()
        record.CopyFrom(current)
        record.spec.CopyFrom(spec)
        record.generation += 1
        record.update_time.CopyFrom(self._stamp())
        return record

    def _changed(self, spec: apb.ApplicationSpec) -> apb.ApplicationRecord | None:
        """The record `spec` makes, or None when it is what is stored. One that
        failed to deploy (its build, or a deployment's starts until they gave up)
        is built and applied again, unchanged: the failure may have passed."""
        current = self._records.get(spec.name)
        if current is None:
            return apb.ApplicationRecord(spec=spec, generation=1, update_time=self._stamp())
        failed = not current.deleted and (
            current.failed_generation == current.generation
            or any(self._deployments.gave_up((spec.name, d)) for d in current.deployment_names))
        if current.spec == spec and not current.deleted and not failed:
            return None
        if (not current.deleted and not pending(current) and not failed
                and _without_traffic(current.spec) == _without_traffic(spec)):
            # Only the traffic policy changed: no rebuild, if the targets exist.
            try:
                check_traffic_targets(spec, list(current.deployment_names))
            except InvalidArgument as e:
                raise InvalidArgument(f"applications[{spec.name}].{e.field}", e.rule) from None
            record = apb.ApplicationRecord()
            record.CopyFrom(current)
            record.spec.CopyFrom(spec)
            record.update_time.CopyFrom(self._stamp())
            return record
        record = self._next(current, spec)
        record.deleted = False
        return record

    async def delete(self, names: list[str]) -> list[str]:
        for i, name in enumerate(names):
            check_name(f"names[{i}]", name)
        async with self._lock:
            await self._refresh_if_stale()
            targets = [n for n in dict.fromkeys(names)
                       if n in self._records and not self._records[n].deleted]
            updated: dict[str, apb.ApplicationRecord | None] = {}
            for name in targets:
                record = self._next(self._records[name], self._records[name].spec)
                record.deleted = True
                updated[name] = record
            if updated:
                await self._commit([self._put(r) for r in updated.values() if r], updated,
                                   self._on_goal)
            gone = [self.unusable[n] for n in dict.fromkeys(names) if n in self.unusable]
            if gone:
                await self._commit([Delete(p.key) for p in gone],
                                   {p.application: None for p in gone})
        return targets + [p.application for p in gone]

    async def set_traffic(self, name: str, traffic: apb.TrafficPolicy) -> None:
        check_name("application", name)
        check_traffic("traffic", traffic)
        async with self._lock:
            await self._refresh_if_stale()
            current = self._records.get(name)
            if current is None or current.deleted:
                raise NotFound(f"application {name} not found")
            check_traffic_targets(apb.ApplicationSpec(name=name, traffic=traffic),
                                  list(current.deployment_names))
            record = apb.ApplicationRecord()
            record.CopyFrom(current)
            record.spec.traffic.CopyFrom(traffic)
            record.update_time.CopyFrom(self._stamp())
            await self._commit([self._put(record)], {name: record},
                               lambda: self._on_traffic(name))

    async def clear(self) -> None:
        """Forget every application record (Shutdown deletes the deployments itself);
        from then on, this term's table refuses writes (a build under way writes nothing)."""
        async with self._lock:
            keys = {self._keys.application(n): n for n in sorted(self._records)}
            keys.update({p.key: p.application for p in self.unusable.values()})
            found = list(keys.items())
            for start in range(0, len(found), MAX_OPS_PER_TXN):
                chunk = found[start:start + MAX_OPS_PER_TXN]
                await self._commit([Delete(key) for key, _ in chunk],
                                   dict.fromkeys(name for _, name in chunk))
            self.closed = True

    # -- the results of builds (reconcile/builds.py) -----------------------------------

    async def apply_build(self, name: str, generation: int,
                          specs: list[dpb.DeploymentSpec]) -> None:
        """Make `specs` the application's deployments and mark `generation`
        applied (a deleted application: delete them and its record); nothing
        if a newer generation superseded it. InvalidArgument or AlreadyExists
        when the specs cannot be applied."""
        async with self._lock:
            current = self._records.get(name)
            if current is None or current.generation != generation:
                return  # superseded while building
            if not current.deleted:
                # SetTraffic may have changed the policy while this was building.
                check_traffic_targets(current.spec, [s.name for s in specs])
            if current.deleted:
                ops: list[Op] = [Delete(self._keys.application(name))]
                updated: dict[str, apb.ApplicationRecord | None] = {name: None}
            else:
                record = apb.ApplicationRecord()
                record.CopyFrom(current)
                record.applied_generation = generation
                record.build_error, record.failed_generation = "", 0
                del record.deployment_names[:]
                record.deployment_names.extend(s.name for s in specs)
                ops, updated = [self._put(record)], {name: record}
            if self.closed:
                return

            def after() -> None:
                self._mirror(updated)
                self._on_traffic(name)

            await self._deployments.apply_application(name, specs, ops, after)
        logger.info("application %s: generation %d applied (%d deployments)", name,
                    generation, len(specs))

    async def fail_build(self, name: str, generation: int, error: str) -> None:
        """Record that `generation` failed to build or apply (unless superseded)."""
        async with self._lock:
            current = self._records.get(name)
            if current is None or current.generation != generation:
                return
            record = apb.ApplicationRecord()
            record.CopyFrom(current)
            record.build_error = error[:64 * 1024]
            record.failed_generation = generation
            # An application that never built is routed to a refusal (unservable.py).
            await self._commit([self._put(record)], {name: record},
                               lambda: self._on_traffic(name))
