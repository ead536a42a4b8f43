"""The gRPC face of the controller: ControllerService and the leader gate.

`LeaderGate` answers every ControllerService call with UNAVAILABLE while this
controller is not the serving leader, putting the leader's address in the
trailing metadata key `servefleet-leader` so clients can go there. Health and
reflection are not gated: a standby is alive and says so.

`ControllerServicer` turns requests into calls on the deployment table and
errors into statuses: an ApiError becomes its own code and message; anything
else is a bug, logged with its traceback and answered INTERNAL.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, records_pb2, status_pb2, watch_pb2

from ..election import LeaderElection
from ..errors import ApiError, FailedPrecondition, NotLeader
from ..goals.applications import ApplicationTable
from ..goals.deployments import DeploymentTable
from ..goals.spec import DEFAULT_APPLICATION
from ..load import LoadReports
from ..reconcile.observed import planned_status, replica_counts, replica_infos
from ..reconcile.replicas import Reconciler
from ..watch import MAX_WATCH_KEYS, Publisher, check_watch_key, serve_watch
from .status import Observed, cluster_status

logger = logging.getLogger(__name__)

SERVICE_NAME = "servefleet.v1.ControllerService"
STREAMING_METHODS = {f"/{SERVICE_NAME}/Watch"}
LEADER_METADATA_KEY = "servefleet-leader"

R = TypeVar("R")


def _stamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def _leader_metadata(leader: str | None) -> tuple[tuple[str, str], ...]:
    return ((LEADER_METADATA_KEY, leader),) if leader else ()


class Leadership:
    """What the gate and the servicer need to know about this controller's role."""

    def __init__(self, election: LeaderElection) -> None:
        self.election = election
        self.identity = election.identity
        # True only while leading with state loaded for the current term.
        self.serving = False

    def can_serve(self) -> bool:
        return self.serving and self.election.lease_valid()

    async def abort_not_leader(self, context: grpc.aio.ServicerContext) -> None:
        hint = await self.hint()
        await context.abort(grpc.StatusCode.UNAVAILABLE, NotLeader(hint).message,
                            trailing_metadata=_leader_metadata(hint))

    async def hint(self) -> str | None:
        """Where a client should go instead of here, reading the store if unsure."""
        leader = self.election.leader
        if leader is None or leader == self.identity:
            leader = await self.election.lookup_leader()
        return None if leader == self.identity else leader


class LeaderGate(grpc.aio.ServerInterceptor):
    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership
        self._reject_handler = grpc.unary_unary_rpc_method_handler(self._reject)
        self._reject_stream_handler = grpc.unary_stream_rpc_method_handler(self._reject_stream)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method  # type: ignore[attr-defined]
        if method.startswith(f"/{SERVICE_NAME}/") and not self._leadership.can_serve():
            if method in STREAMING_METHODS:
                return self._reject_stream_handler
            return self._reject_handler
        return await continuation(handler_call_details)

    async def _reject(self, request: bytes, context: grpc.aio.ServicerContext) -> None:
        await self._leadership.abort_not_leader(context)

    async def _reject_stream(self, request: bytes,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        await self._leadership.abort_not_leader(context)
        yield None  # never reached: makes this a streaming handler


def api_method(fn: Callable[..., Awaitable[R]]) -> Callable[..., Awaitable[R]]:
    """Map ApiError to its status; log and answer INTERNAL for anything else."""

    @functools.wraps(fn)
    async def wrapper(self: ControllerServicer, request: Any,
                      context: grpc.aio.ServicerContext) -> R:
        try:
            return await fn(self, request, context)
        except ApiError as e:
            hint, message = None, e.message
            if isinstance(e, NotLeader):
                hint = e.leader or await self._leadership.hint()
                message = NotLeader(hint).message
            else:
                logger.info("refused %s: %s: %s", fn.__name__, e.code.name, message)
            await context.abort(e.code, message, trailing_metadata=_leader_metadata(hint))
        except Exception:
            logger.exception("internal error in %s", fn.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {fn.__name__}")
        raise AssertionError("unreachable: abort raises")

    return wrapper


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    def __init__(self, cluster: str, leadership: Leadership,
                 deployments: Callable[[], DeploymentTable],
                 reconciler: Callable[[], Reconciler | None],
                 publisher: Callable[[], Publisher],
                 on_shutdown: Callable[[], None], load: LoadReports | None = None,
                 members: Callable[[], list[str]] | None = None,
                 applications: Callable[[], ApplicationTable] | None = None) -> None:
        self._cluster = cluster
        self._applications = applications
        # Advertised addresses of the live controllers (members.py).
        self._members = members or (lambda: [])
        self._leadership = leadership
        # A callable: the table is replaced at each leader term.
        self._deployments = deployments
        self._reconciler = reconciler
        self._publisher = publisher
        self._load = load or LoadReports()
        self._on_shutdown = on_shutdown

    @api_method
    async def Deploy(self, request: api.DeployRequest, context: Any) -> api.DeployResponse:
        self._check_not_owned(request.spec.application or DEFAULT_APPLICATION)
        version, updating = await self._deployments().deploy(request.spec)
        return api.DeployResponse(version=version, updating=updating)

    @api_method
    async def DeleteDeployments(self, request: api.DeleteDeploymentsRequest,
                                context: Any) -> api.DeleteDeploymentsResponse:
        self._check_not_owned(request.application or DEFAULT_APPLICATION)
        deleted = await self._deployments().delete(request.application, request.names)
        return api.DeleteDeploymentsResponse(deleted=deleted)

    @api_method
    async def GetDeployment(self, request: api.GetDeploymentRequest,
                            context: Any) -> api.GetDeploymentResponse:
        record = self._deployments().get(request.application, request.name)
        return api.GetDeploymentResponse(deployment=record)

    @api_method
    async def ListDeployments(self, request: api.ListDeploymentsRequest,
                              context: Any) -> api.ListDeploymentsResponse:
        records = self._deployments().list(include_deleted=request.include_deleted,
                                           application=request.application)
        return api.ListDeploymentsResponse(deployments=records)

    @api_method
    async def ListReplicas(self, request: api.ListReplicasRequest,
                           context: Any) -> api.ListReplicasResponse:
        reconciler = self._reconciler()
        infos = replica_infos(reconciler, request.application, request.deployment) \
            if reconciler is not None else []
        return api.ListReplicasResponse(replicas=infos)

    @api_method
    async def GetStatus(self, request: api.GetStatusRequest,
                        context: Any) -> api.GetStatusResponse:
        reconciler = self._reconciler()

        def observe(record: records_pb2.DeploymentRecord) -> Observed:
            if reconciler is None:
                return {}, None
            key = (record.spec.application, record.spec.name)
            return replica_counts(reconciler, key), planned_status(reconciler, record)

        apps = self._apps()
        applications = cluster_status(self._deployments().live(), observe, apps.records(),
                                      apps.building)
        for app in applications:
            for dep in app.deployments:
                dep.queued_requests = self._load.queued(app.name, dep.name)
        now = time.time()
        proxies = [status_pb2.ProxyStatus(id=w.watcher_id, address=w.address,
                                          healthy=w.healthy(now), last_seen=_stamp(w.last_sent))
                   for w in self._publisher().watchers.values()
                   if w.kind == watch_pb2.WATCHER_KIND_PROXY]
        return api.GetStatusResponse(applications=applications, cluster=self._cluster,
                                     leader=self._leadership.identity,
                                     proxies=sorted(proxies, key=lambda p: p.id),
                                     controllers=sorted(self._members()))

    def _check_not_owned(self, application: str) -> None:
        """Deployments of an application deployed from a config change only through it:
        the next build would silently undo a change made beside it."""
        if self._applications is not None and self._apps().owns(application):
            raise FailedPrecondition(
                f"application {application} is managed by DeployApplications (a config "
                "file): change its deployments there, or delete the application")

    def _apps(self) -> ApplicationTable:
        assert self._applications is not None, "the servicer was built without applications"
        return self._applications()

    @api_method
    async def DeployApplications(self, request: api.DeployApplicationsRequest,
                                 context: Any) -> api.DeployApplicationsResponse:
        changed, deleted = await self._apps().deploy(request)
        return api.DeployApplicationsResponse(changed=changed, deleted=deleted)

    @api_method
    async def ListApplications(self, request: api.ListApplicationsRequest,
                               context: Any) -> api.ListApplicationsResponse:
        apps = self._apps()
        return api.ListApplicationsResponse(applications=apps.live(),
                                            http_options=apps.http_options)

    @api_method
    async def DeleteApplications(self, request: api.DeleteApplicationsRequest,
                                 context: Any) -> api.DeleteApplicationsResponse:
        return api.DeleteApplicationsResponse(deleted=await self._apps().delete(
            list(request.names)))

    @api_method
    async def SetTraffic(self, request: api.SetTrafficRequest,
                         context: Any) -> api.SetTrafficResponse:
        await self._apps().set_traffic(request.application, request.traffic)
        return api.SetTrafficResponse()

    @api_method
    async def ReportLoad(self, request: api.ReportLoadRequest,
                         context: Any) -> api.ReportLoadResponse:
        self._load.record(request.reporter_id, request.queued)
        return api.ReportLoadResponse()

    async def Watch(self, request: watch_pb2.WatchRequest,
                    context: grpc.aio.ServicerContext) -> AsyncIterator[watch_pb2.WatchResponse]:
        """Stream snapshots; INVALID_ARGUMENT for an unknown key, UNAVAILABLE on losing lead."""
        if len(request.known) > MAX_WATCH_KEYS:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"known: at most {MAX_WATCH_KEYS} keys")
        for key in request.known:
            problem = check_watch_key(key)
            if problem:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"known[{key!r}]: {problem}")
        async for response in serve_watch(self._publisher(), request,
                                          self._leadership.can_serve):
            yield response
        await self._leadership.abort_not_leader(context)

    @api_method
    async def Shutdown(self, request: api.ShutdownRequest, context: Any) -> api.ShutdownResponse:
        await self._apps().clear()
        count = await self._deployments().delete_all()
        logger.info("shutdown requested: deleted %d deployments; stopping their replicas, "
                    "then exiting", count)
        self._on_shutdown()
        return api.ShutdownResponse()
