"""ServeApplications as a reconciler on the leader's loop (reconcile/loop.py).

A pass:

1. `begin_pass` keeps the watch running (cache.py's `sync`, the loop's
   work) and the loading of the ownership records once a term (also the
   loop's work, so both are retried with its backoff), reads each object (once
   per generation: objects.py) and makes the pass's plan (ownership.py);
   nothing is decided before the first listing and the records are in;
2. `reconcile(application)` spawns its deploy (the ownership record first
   when it changes, then ApplicationTable.deploy with `partial`, the path of
   DeployApplications) or its release (ApplicationTable.delete, then the
   record);
3. `end_pass`, every STATUS_PERIOD_S or at once after a change, builds each
   object's status (status.py) from GetStatus's view of its application
   and writes those that changed to the status subresource.

A deploy the controller refuses (INVALID_ARGUMENT, PERMISSION_DENIED,
ALREADY_EXISTS, FAILED_PRECONDITION) is the object's INVALID status, not a
failure to retry: it is tried again when the object changes, or after
REFUSED_RETRY_S (a route another application held may be free by then).
An unavailable store fails the work, and the loop backs off.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable
from functools import partial
from typing import Any

from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import status_pb2

from ..clock import Clock
from ..errors import ApiError, Unavailable
from ..goals.applications import ApplicationTable
from ..reconcile.loop import ReconcileLoop
from ..runtime.kubernetes_api import ApiError as KubeError
from .cache import ObjectCache, ObjectsApi
from .objects import ServeApp, in_spec, read_object
from .owners import OwnerRecords
from .ownership import Applied, Deploy, Plan, Release, plan
from .status import Known, build_status

WATCH_KEY = ("serveapplications", "watch")
LOAD_KEY = ("serveapplications", "ownership records")
STATUS_PERIOD_S = 1.0
REFUSED_RETRY_S = 30.0


def _rfc3339(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(int(seconds), datetime.UTC).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


class ServeApplicationReconciler:
    name = "serveapplications"

    def __init__(self, objects: ObjectsApi, owners: OwnerRecords,
                 applications: ApplicationTable,
                 status: Callable[[], list[status_pb2.ApplicationStatusInfo]],
                 loop: ReconcileLoop, clock: Clock) -> None:
        self._api = objects
        self.cache = ObjectCache(objects)
        self._owners = owners
        self._applications = applications
        self._status = status
        self._loop = loop
        self._clock = clock
        self._read: dict[str, ServeApp] = {}  # by uid, at the generation read
        self._applied: dict[str, Applied] = {}  # by application
        # By application: (uid, generation, why refused, when).
        self._refused: dict[str, tuple[str, int, str, float]] = {}
        self._written: dict[str, dict[str, Any]] = {}  # by uid: the status last written
        self._plan: Plan | None = None
        self._objects: list[ServeApp] = []
        self._status_at = float("-inf")

    # -- 1. the pass's plan ----------------------------------------------------------

    async def begin_pass(self, now: float) -> None:
        if not self._loop.busy(WATCH_KEY):
            self._loop.spawn(WATCH_KEY, self.cache.sync)
        self._plan = None
        if not self._owners.loaded:
            self._loop.spawn(LOAD_KEY, self._owners.load)  # retried with the loop's backoff
            return
        if not self.cache.synced:
            return
        for app, (_, _, _, at) in self._refused.items():
            if now - at >= REFUSED_RETRY_S:
                # Deployed again; the refusal stays shown until the answer replaces it.
                self._applied.pop(app, None)
        self._objects = [self._object(obj) for obj in self.cache.objects.values()]
        live = {r.spec.name: r.generation for r in self._applications.live()}
        self._plan = plan(self._api.namespace, self._objects, self._owners.records, live,
                          self._applied)

    def _object(self, obj: dict[str, Any]) -> ServeApp:
        meta = obj.get("metadata") or {}
        read = self._read.get(meta.get("uid", ""))
        if read is None or read.generation != meta.get("generation"):
            read = read_object(obj)
            self._read[read.uid] = read
        return read

    # -- 2. deploys and releases --------------------------------------------------------

    def keys(self) -> list[str]:
        if self._plan is None:
            return []
        return [*self._plan.deploy, *self._plan.release]

    def reconcile(self, key: str, now: float) -> None:
        assert self._plan is not None
        if key in self._plan.deploy:
            deploy = self._plan.deploy[key]
            self._loop.spawn(("serveapplications", key), lambda: self._deploy(deploy))
        else:
            release = self._plan.release[key]
            self._loop.spawn(("serveapplications", key), lambda: self._release(release))

    async def _deploy(self, action: Deploy) -> None:
        app, obj, spec = action.application, action.obj, action.obj.spec
        assert spec is not None
        if self._owners.records.get(app) != action.owner:
            await self._owners.put(app, action.owner)
        try:
            await self._applications.deploy(
                api.DeployApplicationsRequest(applications=[spec], partial=True))
        except Unavailable:
            raise
        except ApiError as e:
            self._refused[app] = (obj.uid, obj.generation, in_spec(e.message),
                                  self._clock.monotonic())
        else:
            self._refused.pop(app, None)
        record = self._applications.record(app)
        self._applied[app] = Applied(obj.uid, obj.generation,
                                     record.generation if record and not record.deleted else 0)
        self._status_at = float("-inf")  # say so at once

    async def _release(self, action: Release) -> None:
        app = action.application
        if action.live:
            await self._applications.delete([app])
        await self._owners.delete(app)
        self._applied.pop(app, None)
        self._refused.pop(app, None)

    # -- 3. status ---------------------------------------------------------------------------

    def end_pass(self, now: float) -> None:
        if self._plan is None or now - self._status_at < STATUS_PERIOD_S:
            return
        self._status_at = now
        apps = {info.name: info for info in self._status()} if self._objects else {}
        stamp = _rfc3339(self._clock.time())
        seen = set()
        for obj in self._objects:
            seen.add(obj.uid)
            current = self.cache.objects.get(obj.name)
            if current is None or (current.get("metadata") or {}).get("uid") != obj.uid:
                continue
            status = build_status(obj, self._known(obj, apps), current.get("status"), stamp)
            if status != current.get("status") and status != self._written.get(obj.uid):
                self._loop.spawn(("serveapplications-status", obj.name),
                                 partial(self._write, current, status))
        for gone in set(self._read) - seen:
            self._read.pop(gone, None)
            self._written.pop(gone, None)

    def _known(self, obj: ServeApp, apps: dict[str, status_pb2.ApplicationStatusInfo]
               ) -> Known:
        assert self._plan is not None
        holds = self._plan.holds.get(obj.name, "")
        refused = self._refused.get(holds or obj.application)
        applied = self._applied.get(holds)
        return Known(holds=holds, conflict=self._plan.conflicts.get(obj.name, ""),
                     refused=refused[2] if refused and refused[:2] == (obj.uid, obj.generation)
                     else "",
                     applied_generation=applied.generation
                     if applied and applied.uid == obj.uid else 0,
                     app=apps.get(holds) if holds else None)

    async def _write(self, obj: dict[str, Any], status: dict[str, Any]) -> None:
        updated = copy.deepcopy(obj)
        updated["status"] = status
        try:
            await self._api.write_status(updated)
        except KubeError as e:
            if e.status in (404, 409):
                return  # deleted, or changed since: the next pass sees the new one
            raise
        self._written[obj["metadata"]["uid"]] = status
