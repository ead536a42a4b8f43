"""The deployment goals: the leader's in-memory copy and its fenced writes.

The store is the truth; this table mirrors it for the current leader term. It
is loaded once when a controller wins the election (`load`) and afterwards
changes only through `deploy` and `delete`, which write to the store first
(one fenced transaction) and update memory only once the write succeeded.
A failed write therefore leaves both unchanged, and a lost leadership makes
the write fail before anything is touched.

A deploy of an unchanged spec writes nothing; but when the deployment's
replicas failed to start so often that the controller stopped trying
(DEPLOY_FAILED), it asks the replica reconciler to try again (`retry`):
deploying again is how a user says the cause may have passed (a file, a
service, a package outside the spec), as a failed application build is
built again (applications.py).

Mutations are serialised by one lock, so checks such as prev_version and
route-prefix uniqueness see the state they are applied to. Writes follow
store_mirror.py: shielded from the caller's cancellation, and a write whose
outcome is unknown makes the next mutation reload the table first.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Callable, Iterable

from google.protobuf.timestamp_pb2 import Timestamp

from servefleet._private.actor_env import parent_of
from servefleet.v1 import deployment_pb2, records_pb2

from ..clock import Clock
from ..election import FencedStore
from ..errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from ..keys import ClusterKeys
from ..store import Delete, Op, Put, Store
from .code_digest import WorkingDirDigests
from .mirror import StoreMirror
from .policy import DeployPolicy
from .spec import DEFAULT_APPLICATION, check_name, code_hash, normalize_spec, stored_version
from .stored import Unusable, load_deployment

logger = logging.getLogger(__name__)

Key = tuple[str, str]  # (application, name)

# etcd refuses transactions of more than 128 operations (--max-txn-ops) and
# requests over 1.5 MiB (--max-request-bytes).
MAX_OPS_PER_TXN = 100
MAX_RECORD_BYTES = 1024 * 1024
MAX_TXN_BYTES = 1_400_000
# Deleted deployments kept for ListDeployments(include_deleted); older ones go
# once none of their replicas is left.
MAX_DELETED_HISTORY = 1000


def next_record(goal: deployment_pb2.DeploymentSpec,
                live: records_pb2.DeploymentRecord | None,
                now: Timestamp) -> records_pb2.DeploymentRecord:
    """The record that makes `goal` (normalised) the deployment's new goal.
    An autoscaled deployment keeps the autoscaler's count across the update,
    within the new bounds: an update under load does not drop it back to
    initial_replicas."""
    record = records_pb2.DeploymentRecord(
        spec=goal, version=stored_version(goal), code_hash=code_hash(goal),
        start_time=live.start_time if live is not None else now, update_time=now)
    config = goal.replica_config
    if (live is not None and live.HasField("autoscale")
            and config.HasField("autoscaling_config")):
        bounds = config.autoscaling_config
        record.autoscale.CopyFrom(live.autoscale)
        record.autoscale.target_replicas = max(bounds.min_replicas, min(
            bounds.max_replicas, live.autoscale.target_replicas))
    return record


def _timestamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


class DeploymentTable:
    def __init__(self, keys: ClusterKeys, fenced: FencedStore, store: Store,
                 clock: Clock | None = None,
                 on_change: Callable[[str, str], None] | None = None,
                 max_history: int = MAX_DELETED_HISTORY) -> None:
        self._keys = keys
        self._max_history = max_history
        # Whether a deleted deployment may be forgotten: set by the server to
        # "the reconciler tracks none of its replicas".
        self.can_purge: Callable[[Key], bool] = lambda key: True
        # What specs may run (working dirs, images, env); set by the term.
        self.policy = DeployPolicy()
        # Whether starts of a deployment's goal stopped for good, and asking
        # them to start again (True if they had stopped): the replica
        # reconciler's, set by the term (without replicas: never).
        self.gave_up: Callable[[Key], bool] = lambda key: False
        self.retry: Callable[[Key], bool] = lambda key: False
        # Told (application, name) after each change to a deployment's goal.
        self._on_change = on_change or (lambda app, name: None)
        self._writes = StoreMirror(fenced, store, self._reload)
        self._clock = clock or Clock()
        self._records: dict[Key, records_pb2.DeploymentRecord] = {}
        # Stored records this term cannot use, by (application, name): status
        # shows them failed; Deploy replaces them, delete removes them.
        self.unusable: dict[Key, Unusable] = {}
        self._lock = asyncio.Lock()

    # -- loading ------------------------------------------------------------

    async def load(self, store: Store) -> None:
        """Replace memory with the records in the store (a new leader term)."""
        records: dict[Key, records_pb2.DeploymentRecord] = {}
        unusable: dict[Key, Unusable] = {}
        for kv in await store.list_prefix(self._keys.deployments):
            record, problem = load_deployment(self._keys.deployments, kv.key, kv.value)
            if problem is not None:  # set aside, never a poison pill (stored.py)
                logger.error("deployment %s", problem.message)
                unusable[(problem.application, problem.name)] = problem
            elif record is not None:
                records[(record.spec.application, record.spec.name)] = record
        self._records, self.unusable = records, unusable
        live = sum(not r.deleted for r in records.values())
        logger.info("loaded %d deployments (%d deleted) from the store",
                    live, len(records) - live)

    async def _reload(self, store: Store) -> None:
        """`load`, telling the hook what changed (a retry of a landed write writes nothing)."""
        before = self._records
        await self.load(store)
        for key in sorted(k for k in before.keys() | self._records.keys()
                          if before.get(k) != self._records.get(k)):
            self._on_change(*key)

    # -- reads ----------------------------------------------------------------

    def live(self) -> list[records_pb2.DeploymentRecord]:
        return [r for _, r in sorted(self._records.items()) if not r.deleted]

    def get(self, application: str, name: str) -> records_pb2.DeploymentRecord:
        """The live deployment; NotFound if it does not exist or was deleted."""
        application = application or DEFAULT_APPLICATION
        check_name("application", application)
        check_name("name", name)
        record = self._records.get((application, name))
        if record is None or record.deleted:
            raise NotFound(f"deployment {application}/{name} not found")
        return record

    def list(self, *, include_deleted: bool = False,
             application: str = "") -> list[records_pb2.DeploymentRecord]:
        if application:
            check_name("application", application)
        return [r for (app, _), r in sorted(self._records.items())
                if (include_deleted or not r.deleted) and (not application or app == application)]

    # -- writes ---------------------------------------------------------------

    async def _commit(self, ops: builtins.list[Op],
                      updated: dict[Key, records_pb2.DeploymentRecord],
                      after: Callable[[], None] | None = None) -> None:
        """Write (store_mirror.py), then mirror in memory and run `after`."""
        def mirror() -> None:
            self._records.update(updated)
            for key in updated:  # a set-aside record written over is gone
                self.unusable.pop(key, None)
            if after is not None:
                after()
            for key in updated:
                self._on_change(*key)

        await self._writes.write(ops, mirror)

    async def deploy(self, spec: deployment_pb2.DeploymentSpec) -> tuple[str, bool]:
        """Create or update a deployment; returns (stored version, updating).
        An unchanged spec is updating only when its failed starts start over."""
        goal = normalize_spec(spec)
        self.policy.check_deployment("spec", goal)
        await WorkingDirDigests(self.policy.not_code).stamp(goal.runtime, "spec.runtime")
        key = (goal.application, goal.name)
        if goal.ByteSize() > MAX_RECORD_BYTES:
            raise InvalidArgument("spec", f"must be at most {MAX_RECORD_BYTES} bytes once "
                                          "normalised")
        async with self._lock:
            await self._writes.refresh_if_stale()
            current = self._records.get(key)
            live = current if current is not None and not current.deleted else None
            # Equality comes before the prev_version check so that retrying an
            # acknowledged deploy (whose reply was lost) succeeds unchanged.
            if live is not None and live.spec == goal:
                return live.version, self.retry(key)
            self._check_prev_version(spec.prev_version, key, live)
            self._check_route_free(goal, key)
            record = next_record(goal, live, _timestamp(self._clock.time()))
            await self._commit([Put(self._keys.deployment(*key), record.SerializeToString())],
                               {key: record})
        logger.info("deployed %s/%s version %s (%s)", *key, record.version,
                    "updated" if live is not None else "created")
        return record.version, True

    @staticmethod
    def _check_prev_version(prev_version: str, key: Key,
                            live: records_pb2.DeploymentRecord | None) -> None:
        if not prev_version:
            return
        if live is None:
            raise FailedPrecondition(
                f"prev_version {prev_version!r} was given but deployment "
                f"{key[0]}/{key[1]} does not exist")
        if live.version != prev_version:
            raise FailedPrecondition(
                f"prev_version {prev_version!r} does not match the stored version "
                f"{live.version!r} of deployment {key[0]}/{key[1]}")

    def _check_route_free(self, goal: deployment_pb2.DeploymentSpec, key: Key,
                          replacing: str | None = None) -> None:
        """ALREADY_EXISTS if another live deployment (outside application
        `replacing`, whose deployments are being replaced) serves the route."""
        if not goal.HasField("route_prefix"):
            return
        for other_key, other in self._records.items():
            if (other_key != key and not other.deleted and other.spec.HasField("route_prefix")
                    and other_key[0] != replacing
                    and other.spec.route_prefix == goal.route_prefix):
                raise AlreadyExists(
                    f"route_prefix {goal.route_prefix!r} is already used by deployment "
                    f"{other_key[0]}/{other_key[1]}")

    def route_owner(self, route_prefix: str, outside: set[str]) -> Key | None:
        """The live deployment serving `route_prefix`, ignoring applications in `outside`."""
        for key, record in self._records.items():
            if (not record.deleted and key[0] not in outside
                    and record.spec.HasField("route_prefix")
                    and record.spec.route_prefix == route_prefix):
                return key
        return None

    async def set_autoscale(self, key: Key, target: int, reason: str) -> bool:
        """Store the autoscaler's decision for a live autoscaled deployment;
        False (nothing written) if it is gone or no longer autoscaled."""
        async with self._lock:
            current = self._records.get(key)
            if (current is None or current.deleted
                    or not current.spec.replica_config.HasField("autoscaling_config")):
                return False
            record = records_pb2.DeploymentRecord()
            record.CopyFrom(current)
            record.autoscale.target_replicas = target
            record.autoscale.reason = reason
            record.autoscale.decided_time.CopyFrom(_timestamp(self._clock.time()))
            await self._commit([Put(self._keys.deployment(*key), record.SerializeToString())],
                               {key: record})
        return True

    async def apply_application(self, application: str,
                                specs: builtins.list[deployment_pb2.DeploymentSpec],
                                also: builtins.list[Op], after: Callable[[], None]) -> None:
        """Make `specs` the application's live deployments, in one transaction
        together with `also` (`after` mirrors those in memory once written):
        deployments of the application that `specs` does not name are deleted,
        unchanged ones are left alone (but for starting again those whose
        starts gave up: see the module's docstring)."""
        goals = [normalize_spec(spec) for spec in specs]
        for goal in goals:  # what the build reported is checked like a Deploy
            self.policy.check_deployment(f"deployments[{goal.name}]", goal)
        # The files as they are now, which replicas will run.
        digests = WorkingDirDigests(self.policy.not_code)
        for goal in goals:
            await digests.stamp(goal.runtime, f"deployments[{goal.name}].runtime")
        async with self._lock:
            await self._writes.refresh_if_stale()
            now = _timestamp(self._clock.time())
            updated: dict[Key, records_pb2.DeploymentRecord] = {}
            unchanged: list[Key] = []
            for goal in goals:
                key = (application, goal.name)
                self._check_route_free(goal, key, replacing=application)
                current = self._records.get(key)
                live = current if current is not None and not current.deleted else None
                if live is not None and live.spec == goal:
                    unchanged.append(key)
                    continue
                updated[key] = next_record(goal, live, now)
            wanted = {goal.name for goal in goals}
            for key, record in self._records.items():
                if key[0] == application and not record.deleted and key[1] not in wanted:
                    if parent_of(record.spec.runtime.env) in wanted:
                        # An old version's deployment actor: its replicas may still
                        # call it (reconcile/actor_retirement.py deletes it).
                        continue
                    gone = records_pb2.DeploymentRecord()
                    gone.CopyFrom(record)
                    gone.deleted = True
                    gone.end_time.CopyFrom(now)
                    gone.update_time.CopyFrom(now)
                    updated[key] = gone
            ops: list[Op] = [Put(self._keys.deployment(*key), record.SerializeToString())
                             for key, record in updated.items()]
            size = sum(len(op.value) for op in [*ops, *also] if isinstance(op, Put))
            if size > MAX_TXN_BYTES:
                raise InvalidArgument("deployments", f"applying application {application} "
                                      f"writes {size} bytes; at most {MAX_TXN_BYTES} fit in "
                                      "one transaction (large init args?)")
            if len(ops) + len(also) > MAX_OPS_PER_TXN:
                raise InvalidArgument("deployments", f"applying application {application} "
                                      f"takes {len(ops) + len(also)} writes; at most "
                                      f"{MAX_OPS_PER_TXN} fit in one transaction")

            def applied() -> None:
                after()
                for key in unchanged:
                    self.retry(key)

            await self._commit([*ops, *also], updated, applied)
        for (app, name), record in sorted(updated.items()):
            logger.info("application %s: %s %s", app,
                        "deleted" if record.deleted else "deployed", name)

    async def delete(self, application: str, names: Iterable[str]) -> builtins.list[str]:
        """Delete the named live deployments; unknown names are skipped."""
        application = application or DEFAULT_APPLICATION
        check_name("application", application)
        names = list(names)
        for i, name in enumerate(names):
            check_name(f"names[{i}]", name)
        async with self._lock:
            await self._writes.refresh_if_stale()
            targets = [(application, n) for n in dict.fromkeys(names)
                       if (application, n) in self._records
                       and not self._records[(application, n)].deleted]
            await self._mark_deleted(targets)
            targets += await self._remove_unusable([(application, n) for n in names])
            await self._purge_history()
        return [name for _, name in targets]

    async def delete_all(self) -> int:
        """Delete every live deployment (Shutdown); returns how many."""
        async with self._lock:
            await self._writes.refresh_if_stale()
            targets = [k for k, r in sorted(self._records.items()) if not r.deleted]
            await self._mark_deleted(targets)
            targets += await self._remove_unusable(list(self.unusable))
            await self._purge_history()
        return len(targets)

    async def _remove_unusable(self, keys: builtins.list[Key]) -> builtins.list[Key]:
        """Delete the set-aside records among `keys` from the store, by the keys
        they were found at; the keys removed."""
        found = [self.unusable[key] for key in dict.fromkeys(keys) if key in self.unusable]
        for start in range(0, len(found), MAX_OPS_PER_TXN):
            chunk = found[start:start + MAX_OPS_PER_TXN]

            def forget(chunk: builtins.list[Unusable] = chunk) -> None:
                for problem in chunk:
                    self.unusable.pop((problem.application, problem.name), None)

            await self._commit([Delete(p.key) for p in chunk], {}, forget)
        return [(p.application, p.name) for p in found]

    async def _purge_history(self) -> None:
        """Forget the oldest deleted deployments past MAX_DELETED_HISTORY."""
        deleted = sorted((r.end_time.ToNanoseconds(), k) for k, r in self._records.items()
                         if r.deleted)
        excess = len(deleted) - self._max_history
        victims = [k for _, k in deleted if self.can_purge(k)][:max(0, excess)]
        for start in range(0, len(victims), MAX_OPS_PER_TXN):
            chunk = victims[start:start + MAX_OPS_PER_TXN]

            def forget(chunk: list[Key] = chunk) -> None:
                for key in chunk:
                    self._records.pop(key, None)

            await self._commit([Delete(self._keys.deployment(*k)) for k in chunk], {}, forget)
        if victims:
            logger.info("forgot %d deleted deployments (history keeps %d)", len(victims),
                        self._max_history)

    async def _mark_deleted(self, targets: builtins.list[Key]) -> None:
        now = _timestamp(self._clock.time())
        # Chunked to stay under etcd's per-transaction limit; each chunk is
        # atomic, and retrying a partly applied delete finishes it.
        for start in range(0, len(targets), MAX_OPS_PER_TXN):
            chunk = targets[start:start + MAX_OPS_PER_TXN]
            updated: dict[Key, records_pb2.DeploymentRecord] = {}
            ops: list[Op] = []
            for key in chunk:
                record = records_pb2.DeploymentRecord()
                record.CopyFrom(self._records[key])
                record.deleted = True
                record.end_time.CopyFrom(now)
                record.update_time.CopyFrom(now)
                updated[key] = record
                ops.append(Put(self._keys.deployment(*key), record.SerializeToString()))
            await self._commit(ops, updated)
            for app, name in chunk:
                logger.info("deleted %s/%s", app, name)
