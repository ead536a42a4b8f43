"""ControllerService: each RPC a call on the serving leader term's parts.

Requests go to the term's tables (goals/) and read its published observed
state (reconcile/observed.py); errors become statuses through `api_method`
(gate.py). The leader gate keeps calls away while no term serves; a call
that races the end of a term gets UNAVAILABLE like any standby's.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from servefleet._private.wire import check_watch_key
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, watch_pb2

from ..errors import ApiError, FailedPrecondition, InvalidArgument, NotLeader, one_line
from ..goals.spec import DEFAULT_APPLICATION
from ..members import Membership
from ..stream_end import close_requests
from ..term import LeaderTerm
from ..watch import MAX_WATCH_KEYS
from ..watch_stream import serve_watch
from .gate import Leadership, api_method, refuse
from .log_bounds import GET_LOGS, end_follow_after
from .logs import LogStream
from .redact import SEE_SECRETS, redacted_application, redacted_deployment

logger = logging.getLogger(__name__)


class ControllerServicer(controller_pb2_grpc.ControllerServiceServicer):
    # What one GetLogs call may send and how long it may follow.
    log_bounds = GET_LOGS

    def __init__(self, cluster: str, leadership: Leadership,
                 term: Callable[[], LeaderTerm | None], members: Membership,
                 on_shutdown: Callable[[], None],
                 role: Callable[[Any], str] = lambda context: "admin",
                 hop_subject: Callable[[Any], tuple[str, str]] | None = None) -> None:
        self._cluster = cluster
        # The caller's (role, subject) for its hop pass (hop_pass.py).
        self._hop_subject = hop_subject or (lambda context: ("admin", "token:local"))
        # The caller's role (auth.py): specs are shown whole only to SEE_SECRETS.
        self._role = role
        self._leadership = leadership
        # The serving term, or None between terms.
        self._current = term
        # The live controllers (members.py).
        self._members = members
        self._on_shutdown = on_shutdown

    def _term(self) -> LeaderTerm:
        term = self._current()
        if term is None:
            raise NotLeader(None)
        return term

    @api_method
    async def Deploy(self, request: api.DeployRequest, context: Any) -> api.DeployResponse:
        self._check_not_owned(request.spec.application or DEFAULT_APPLICATION)
        version, updating = await self._term().deployments.deploy(request.spec)
        return api.DeployResponse(version=version, updating=updating)

    @api_method
    async def DeleteDeployments(self, request: api.DeleteDeploymentsRequest,
                                context: Any) -> api.DeleteDeploymentsResponse:
        self._check_not_owned(request.application or DEFAULT_APPLICATION)
        deleted = await self._term().deployments.delete(request.application, request.names)
        return api.DeleteDeploymentsResponse(deleted=deleted)

    @api_method
    async def GetDeployment(self, request: api.GetDeploymentRequest,
                            context: Any) -> api.GetDeploymentResponse:
        record = self._term().deployments.get(request.application, request.name)
        if self._role(context) not in SEE_SECRETS:
            record = redacted_deployment(record)
        return api.GetDeploymentResponse(deployment=record)

    @api_method
    async def ListDeployments(self, request: api.ListDeploymentsRequest,
                              context: Any) -> api.ListDeploymentsResponse:
        records = self._term().deployments.list(include_deleted=request.include_deleted,
                                                application=request.application)
        if self._role(context) not in SEE_SECRETS:
            records = [redacted_deployment(r) for r in records]
        return api.ListDeploymentsResponse(deployments=records)

    @api_method
    async def ListReplicas(self, request: api.ListReplicasRequest,
                           context: Any) -> api.ListReplicasResponse:
        infos = self._term().replica_infos(request.application, request.deployment)
        return api.ListReplicasResponse(replicas=infos)

    @api_method
    async def GetStatus(self, request: api.GetStatusRequest,
                        context: Any) -> api.GetStatusResponse:
        return self._term().status_response(self._cluster, self._leadership.identity,
                                            self._members.addresses)

    def _check_not_owned(self, application: str) -> None:
        """Deployments of an application deployed from a config change only through it:
        the next build would silently undo a change made beside it."""
        if self._term().applications.owns(application):
            raise FailedPrecondition(
                f"application {application} is managed by DeployApplications (a config "
                "file): change its deployments there, or delete the application")

    @api_method
    async def DeployApplications(self, request: api.DeployApplicationsRequest,
                                 context: Any) -> api.DeployApplicationsResponse:
        changed, deleted = await self._term().applications.deploy(request)
        return api.DeployApplicationsResponse(changed=changed, deleted=deleted)

    @api_method
    async def ListApplications(self, request: api.ListApplicationsRequest,
                               context: Any) -> api.ListApplicationsResponse:
        apps = self._term().applications
        live = apps.live()
        if self._role(context) not in SEE_SECRETS:
            live = [redacted_application(a) for a in live]
        return api.ListApplicationsResponse(applications=live, http_options=apps.http_options)

    @api_method
    async def DeleteApplications(self, request: api.DeleteApplicationsRequest,
                                 context: Any) -> api.DeleteApplicationsResponse:
        return api.DeleteApplicationsResponse(deleted=await self._term().applications.delete(
            list(request.names)))

    @api_method
    async def SetTraffic(self, request: api.SetTrafficRequest,
                         context: Any) -> api.SetTrafficResponse:
        await self._term().applications.set_traffic(request.application, request.traffic)
        return api.SetTrafficResponse()

    @api_method
    async def ReportLoad(self, request: api.ReportLoadRequest,
                         context: Any) -> api.ReportLoadResponse:
        self._term().record_load(request)
        return api.ReportLoadResponse()

    @api_method
    async def StreamLoad(self, requests: AsyncIterator[api.StreamLoadRequest],
                         context: Any) -> api.StreamLoadResponse:
        """Reports of one reporter; INVALID_ARGUMENT for a bad report (nothing of it
        stored) or one of another reporter than the stream's first."""
        term = self._term()
        reporter = None
        try:
            async for message in requests:
                if self._current() is not term or not self._leadership.can_serve():
                    raise NotLeader(None)  # the reporter goes on with the new leader
                report = message.report
                reporter = reporter or report.reporter_id
                if report.reporter_id != reporter:
                    # One stream holds one report: it cannot fill the table alone.
                    raise InvalidArgument("report.reporter_id", "a stream carries the "
                                          f"reports of one reporter, {one_line(reporter)}")
                term.record_load(report)
        finally:
            await close_requests(requests)
        return api.StreamLoadResponse()

    async def GetLogs(self, request: api.GetLogsRequest,
                      context: grpc.aio.ServicerContext) -> AsyncIterator[api.GetLogsResponse]:
        """The matching replicas' output; see controller/api/logs.py. Bounded in
        bytes and, with follow, in time (log_bounds.py)."""
        ending = None
        try:
            term = self._term()
            stream = LogStream(term, term.runtime, request, self.log_bounds)
            if request.follow:
                ending = end_follow_after(self.log_bounds, context)
            async for response in stream.run(self._leadership.can_serve):
                yield response
        except ApiError as e:
            await context.abort(e.code, e.message)
        except Exception:
            logger.exception("GetLogs failed")
            await context.abort(grpc.StatusCode.INTERNAL, "internal error in GetLogs")
        finally:
            if ending is not None:
                ending.cancel()

    async def Watch(self, request: watch_pb2.WatchRequest,
                    context: grpc.aio.ServicerContext) -> AsyncIterator[watch_pb2.WatchResponse]:
        """Stream snapshots; INVALID_ARGUMENT for an unknown key, UNAVAILABLE on losing
        lead, RESOURCE_EXHAUSTED once the client stops reading (watch_stream.py)."""
        problem = _watch_request_problem(request)
        if problem is not None:
            # Set, not aborted with: an abort's frames would keep the request.
            logger.info("refused Watch: %s: %s", problem.code.name, problem.message)
            refuse(context, problem.code, problem.message)
            return
        async for response in serve_watch(self._term().publisher, request,
                                          self._leadership.can_serve, context):
            yield response
        await self._leadership.abort_not_leader(context)

    @api_method
    async def GetHopPass(self, request: api.GetHopPassRequest,
                         context: Any) -> api.GetHopPassResponse:
        hop = self._term().hop
        if not hop.required:
            unneeded = FailedPrecondition("this cluster has no credentials (tokens or "
                                          "certificates): its replicas need no hop pass")
            unneeded.expected = True  # every proxy and replica asks once at start
            raise unneeded
        role, subject = self._hop_subject(context)
        issued, expires = hop.issue(subject, role)
        stamp = Timestamp()
        stamp.FromNanoseconds(int(expires * 1e9))
        return api.GetHopPassResponse(expires=stamp, subject=subject, **{"pass": issued})

    @api_method
    async def Shutdown(self, request: api.ShutdownRequest, context: Any) -> api.ShutdownResponse:
        await self._term().applications.clear()
        count = await self._term().deployments.delete_all()
        logger.info("shutdown requested: deleted %d deployments; stopping their replicas, "
                    "then exiting", count)
        self._on_shutdown()
        return api.ShutdownResponse()


def _watch_request_problem(request: watch_pb2.WatchRequest) -> InvalidArgument | None:
    if len(request.known) > MAX_WATCH_KEYS:
        return InvalidArgument("known", f"at most {MAX_WATCH_KEYS} keys, got "
                               f"{len(request.known)}")
    for key in request.known:
        problem = check_watch_key(key)
        if problem:
            return InvalidArgument(f"known[{one_line(key)}]", problem)
    return None
