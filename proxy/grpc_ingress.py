"""The proxy's gRPC ingress: users' own gRPC services, routed to replicas as raw bytes.

`servefleet proxy --grpc-listen HOST:PORT` serves every method path
(`/package.Service/Method`) with one generic handler, so the proxy needs none
of the users' protos. Per call:

1. route: the `application` metadata key names the application (Ray
   Serve's key); without it, the one application whose ingress serves the
   call's service, or the only application serving gRPC (routes.py). None:
   NOT_FOUND naming the applications there are.
2. an application with require_token wants `authorization: Bearer TOKEN`
   (the --http-tokens file): UNAUTHENTICATED otherwise; the token stays here
   and its name goes on as `x-servefleet-caller`. No `x-servefleet-*` key a
   client sends goes on: those are the cluster's own (servefleet/_private/wire.py).
3. forward (servefleet/_private/dataplane/grpc_forward.py): the same pool, queue and
   balancer as HTTP; a call no replica processed is retried on another one.
   The deadline is the client's, bounded by the request timeout (the
   proxy's --request-timeout-s, else the cluster's); it goes on to the
   replica. `x-request-id` is kept or made up.
4. relay the messages and the trailing metadata; the replica's status is
   the call's status. A client that cancels cancels the replica's call.

Statuses of the proxy's own: NOT_FOUND (no route), UNAUTHENTICATED,
UNAVAILABLE (no replica yet, no replica took it: all retryable),
RESOURCE_EXHAUSTED past max_queued_requests (Ray's answer to backpressure),
DEADLINE_EXCEEDED, and RESOURCE_EXHAUSTED for a request message past
GRPC_MAX_REQUEST_BYTES (4 MiB, what replicas take; gRPC's own refusal,
before any of this runs: "Received message larger than max (N vs.
4194304)"). The port also serves grpc.health.v1 and
servefleet.v1.IngressService (ListApplications, for whom --admin-paths
lets read /-/routes: grpc_edge.py; Healthz).
Every shape is forwarded: unary and server-streaming calls with their one
request (retried whole), client-streaming and bidirectional ones with their
messages relayed as they come, none before a replica took the call
(dataplane/grpc_requests.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from servefleet._private.dataplane.balancer import (
    Overloaded,
    QueueFull,
    ReplicaPool,
    Unservable,
)
from servefleet._private.dataplane.forward import MAX_ATTEMPTS, NoReplicaTook
from servefleet._private.dataplane.grpc_forward import (
    Answer,
    CallFailed,
    GrpcChannels,
    forward_grpc,
)
from servefleet._private.dataplane.grpc_requests import forward_grpc_requests
from servefleet._private.edge.deadlines import Deadlines
from servefleet._private.edge.limits import EdgeLimits
from servefleet._private.grpc_guard import Guard
from servefleet._private.observability.logs import REQUEST_ID, new_request_id
from servefleet._private.security.tokens import TokenTable
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import (
    APPLICATION_METADATA_KEY,
    CALLER_HEADER,
    OWN_HEADER_PREFIX,
    REJECTED_METADATA_KEY,
    REQUEST_ID_METADATA_KEY,
    ROUTING_KEY_HEADER,
    TRACE_HEADERS,
)
from servefleet.v1 import ingress_pb2, ingress_pb2_grpc

from .access import AdminAccess
from .grpc_edge import admin_refusal, ingress_options
from .metrics import ProxyMetrics
from .routes import DEFAULT_ANSWER_START_S, GrpcShape, NoGrpcRoute, RouteTable
from .state import ProxyState

logger = logging.getLogger(__name__)
_CALLER = CALLER_HEADER.decode()
# Not forwarded: the transport's own, the request id (kept or made up, then
# added), the trace context (set per attempt: grpc_forward.py), and what
# only the proxy may say (any key with _OWN_PREFIX).
_DROPPED = frozenset({"user-agent", "te", "content-type", "grpc-timeout", "grpc-encoding",
                      "grpc-accept-encoding", REQUEST_ID_METADATA_KEY,
                      *(k.decode() for k in TRACE_HEADERS)})
_OWN_PREFIX = OWN_HEADER_PREFIX.decode()
_ROUTING_KEY = ROUTING_KEY_HEADER.decode()  # for the deployment's router (routers.py)
_OWN_SERVICES = ("/" + ingress_pb2.DESCRIPTOR.services_by_name["IngressService"].full_name,
                 "/grpc.health.v1.Health/")
_LIST = _OWN_SERVICES[0] + "/ListApplications"
_Code = grpc.StatusCode
# Method handlers kept per method path, up to this many.
_MAX_CACHED_METHODS = 1024
_DEADLINE_MARGIN_S = 0.05  # answer this much before a caller's deadline at most


class _Abort(Exception):
    """End the call with this status (and trailing metadata)."""

    def __init__(self, code: grpc.StatusCode, details: str,
                 trailing: tuple[tuple[str, Any], ...] = ()) -> None:
        super().__init__(details)
        self.code, self.trailing = code, trailing


def _caller(metadata: tuple[tuple[str, Any], ...], tokens: TokenTable | None) -> str | None:
    if tokens is None:
        return None
    value = next((v for k, v in metadata if k == "authorization"), None)
    if not isinstance(value, str):
        return None
    scheme, _, token = value.partition(" ")
    entry = tokens.lookup(token.strip()) if scheme.lower() == "bearer" else None
    return entry.name if entry is not None else None


class GrpcProxy:
    def __init__(self, pools: Callable[[str, str], ReplicaPool | None],
                 routes: Callable[[], RouteTable], channels: GrpcChannels,
                 request_timeout_s: float | None = None,
                 tokens: Callable[[], TokenTable | None] = lambda: None,
                 metrics: ProxyMetrics | None = None) -> None:
        self._pools = pools
        self._routes = routes
        self._channels = channels
        self._timeout = request_timeout_s
        self.tokens = tokens
        self._metrics = metrics
        # Who may call ListApplications: whom --admin-paths lets read /-/routes.
        self.admin = AdminAccess()
        self.draining = False
        # The Watch state (main.py): a call before the first routes waits for them.
        self.first_sync: ProxyState | None = None
        # Without a deadline or request timeout, the bound on the wait for an answer's start.
        self.answer_start_s = DEFAULT_ANSWER_START_S
        self._deadlines = Deadlines()  # the default answer-start bounds, on one timer

    def generic_handler(self) -> grpc.GenericRpcHandler:
        """Every method but the port's own: unary-unary for RPCs the route table
        knows to be unary (the cheaper call), stream-stream for those whose
        requests stream, unary-stream for the rest."""
        handlers: dict[tuple[str, GrpcShape], grpc.RpcMethodHandler] = {}
        proxy = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, call: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
                method: str = call.method
                if method.startswith(_OWN_SERVICES):
                    return None
                shape = proxy._routes().grpc_shape(method)
                found = handlers.get((method, shape))
                if found is None:
                    if shape is GrpcShape.UNARY:
                        found = grpc.unary_unary_rpc_method_handler(
                            partial(proxy.handle_unary, method))
                    elif shape is GrpcShape.REQUESTS:
                        found = grpc.stream_stream_rpc_method_handler(
                            partial(proxy.handle_requests, method))
                    else:
                        found = grpc.unary_stream_rpc_method_handler(
                            partial(proxy.handle, method))
                    if len(handlers) < _MAX_CACHED_METHODS:  # clients choose the names
                        handlers[(method, shape)] = found
                return found

        return Handler()

    async def handle(self, method: str, request: bytes | AsyncIterator[bytes],
                     context: grpc.aio.ServicerContext) -> None:
        """Forward one call of one request (unary or server streaming: on the
        wire, the same), writing the messages as they come."""
        async def relay(answer: Answer) -> None:
            async for message in answer.messages():
                await context.write(message)
            await _pass_trailing(answer, context)

        await self._call(method, request, context, relay, unary=False)

    async def handle_requests(self, method: str, requests: AsyncIterator[bytes],
                              context: grpc.aio.ServicerContext) -> None:
        """Forward one call whose requests stream (client streaming or
        bidirectional), relaying messages both ways as they come."""
        await self.handle(method, requests, context)

    async def handle_unary(self, method: str, request: bytes,
                           context: grpc.aio.ServicerContext) -> bytes | None:
        """Forward one call of an RPC known to be unary."""
        answer: list[bytes | None] = [None]

        async def relay(got: Answer) -> None:
            answer[0] = got.first
            await _pass_trailing(got, context)

        await self._call(method, request, context, relay, unary=True)
        return answer[0]

    async def _call(self, method: str, request: bytes | AsyncIterator[bytes],
                    context: grpc.aio.ServicerContext,
                    relay: Callable[[Answer], Awaitable[None]], unary: bool) -> None:
        service = method[1:].rpartition("/")[0]
        metadata = tuple(context.invocation_metadata() or ())
        request_id = next((str(v) for k, v in metadata if k == REQUEST_ID_METADATA_KEY and v),
                          "") or new_request_id()
        REQUEST_ID.set(request_id)
        begun = time.perf_counter()
        application = next((str(v) for k, v in metadata if k == APPLICATION_METADATA_KEY), "")
        deployment, code = "", _Code.OK
        served = tracing.serve(method.lstrip("/"), tracing.incoming(metadata), {
            "rpc.system": "grpc", "rpc.service": service,
            "servefleet.application": application, "servefleet.request_id": request_id})
        try:
            if self.first_sync is not None and not self.first_sync.synced:
                await self.first_sync.wait_synced()  # a proxy just started
            try:
                target = self._routes().grpc_target(application, service)
            except NoGrpcRoute as e:
                raise _Abort(_Code.NOT_FOUND, str(e)) from None
            application, deployment = target.application, target.pick()
            if service not in target.services:
                service = ""  # the client's word, not a name from the config (metric labels)
            caller = None
            if target.require_token:
                caller = _caller(metadata, self.tokens())
                if caller is None:
                    raise _Abort(_Code.UNAUTHENTICATED, "this application needs a bearer "
                                 "token (metadata authorization: Bearer TOKEN)")
            if target.unavailable:
                raise _Abort(_Code.UNAVAILABLE, target.unavailable)
            pool = self._pools(application, deployment)
            if pool is None:
                raise _Abort(_Code.UNAVAILABLE, f"{application}/{deployment} has no replicas "
                             "known yet")
            forwarded = [(k, v) for k, v in metadata
                         if k not in _DROPPED and not k.startswith((":", _OWN_PREFIX))
                         and not (caller and k == "authorization")]
            forwarded.append((REQUEST_ID_METADATA_KEY, request_id))
            if caller is not None:
                forwarded.append((_CALLER, caller))
            limit = self._timeout or self._routes().request_timeout_s or None
            remaining = context.time_remaining()
            if remaining is not None:
                # Answer a little before the caller's own deadline, so it gets our
                # status and details rather than racing its own clock (a status sent
                # after the caller gave up fails inside grpc, noisily).
                remaining -= min(_DEADLINE_MARGIN_S, remaining / 10)
                limit = remaining if limit is None else min(limit, remaining)
            key = "" if pool.router is None else next(
                (str(v) for k, v in metadata if k == _ROUTING_KEY), "")
            await self._forward(pool, method, request, forwarded, limit, relay, request_id,
                                unary, key)
        except _Abort as e:
            code = e.code
            if not (context.done() or context.cancelled()):
                await context.abort(e.code, str(e), trailing_metadata=e.trailing)
        except asyncio.CancelledError:
            code = _Code.CANCELLED
            raise
        finally:
            # Counted while the call's span is still current: a failed call is
            # listed with its trace id (metrics.py).
            if self._metrics is not None:
                self._metrics.grpc_answered(application, deployment, service, code.name,
                                            time.perf_counter() - begun)
            if served is not None:
                served.set("servefleet.deployment", deployment)
                served.set("rpc.grpc.status_code", code.value[0])
                served.finish(failed=code != _Code.OK)

    async def _forward(self, pool: ReplicaPool, method: str,
                       request: bytes | AsyncIterator[bytes],
                       metadata: list[tuple[str, Any]], timeout: float | None,
                       relay: Callable[[Answer], Awaitable[None]], request_id: str,
                       unary: bool, routing_key: str = "") -> None:
        try:
            # Without a deadline or request timeout, the wait for the answer's
            # start is bounded (routes.DEFAULT_ANSWER_START_S); a stream that began
            # is not. That bound is on one timer (_private/edge/deadlines.py: at most
            # 50 ms late); a deadline, met a little early on purpose, is exact.
            default = self._deadlines.bound(self.answer_start_s) if timeout is None else None
            async with default or asyncio.timeout(timeout):
                async def begun(answer: Answer) -> None:
                    if default is not None:
                        default.lift()
                    await relay(answer)

                if isinstance(request, bytes):
                    await forward_grpc(pool, self._channels, method, request, metadata,
                                       timeout, begun, request_id, unary, routing_key)
                else:
                    await forward_grpc_requests(pool, self._channels, method, request,
                                                metadata, timeout, begun, request_id,
                                                routing_key)
        except CallFailed as e:
            raise _Abort(e.code, e.details, tuple(
                (k, v) for k, v in e.trailing if k != REJECTED_METADATA_KEY)) from None
        except TimeoutError:
            raise _Abort(_Code.DEADLINE_EXCEEDED, f"no answer within "
                         f"{timeout or self.answer_start_s:g}s") from None
        except Unservable as e:
            raise _Abort(_Code.UNAVAILABLE, str(e)) from None
        except QueueFull as e:  # Ray's answer to backpressure over gRPC
            raise _Abort(_Code.RESOURCE_EXHAUSTED, f"{pool.key[0]}/{pool.key[1]} is "
                         f"overloaded: {e}") from None
        except Overloaded as e:
            raise _Abort(_Code.UNAVAILABLE, f"{pool.key[0]}/{pool.key[1]} is overloaded: "
                         f"{e}") from None
        except NoReplicaTook:
            raise _Abort(_Code.UNAVAILABLE, f"no replica took the call after {MAX_ATTEMPTS} "
                         "attempts") from None


async def _pass_trailing(answer: Answer, context: grpc.aio.ServicerContext) -> None:
    trailing = [(k, v) for k, v in await answer.trailing_metadata()
                if k != REJECTED_METADATA_KEY]
    if trailing:
        context.set_trailing_metadata(trailing)


class IngressService(ingress_pb2_grpc.IngressServiceServicer):
    """ListApplications and Healthz (Ray Serve's RayServeAPIService shape)."""

    def __init__(self, proxy: GrpcProxy, routes: Callable[[], RouteTable]) -> None:
        self._proxy, self._routes = proxy, routes

    async def ListApplications(self, request: Any, context: Any) -> Any:
        """Every application and its services, for whom --admin-paths lets
        read /-/routes (grpc_edge.py)."""
        refusal = admin_refusal(self._proxy.admin, self._proxy.tokens(), _LIST, context)
        if refusal is not None:
            context.set_code(refusal[0])
            context.set_details(refusal[1])
            return None
        services: dict[str, set[str]] = {}
        for target in self._routes().grpc:
            services.setdefault(target.application, set()).update(target.services)
        return ingress_pb2.IngressServiceListApplicationsResponse(applications=[
            ingress_pb2.IngressApplication(name=name, services=sorted(found))
            for name, found in sorted(services.items())])

    async def Healthz(self, request: Any, context: Any) -> Any:
        if self._proxy.draining:
            await context.abort(_Code.UNAVAILABLE, "draining")
        return ingress_pb2.HealthzResponse(message="success")


_NO_CAP = EdgeLimits(max_connections=0)
HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
INGRESS_SERVICE = ingress_pb2.DESCRIPTOR.services_by_name["IngressService"].full_name


async def start_grpc_ingress(proxy: GrpcProxy, routes: Callable[[], RouteTable], listen: str,
                             tls_cert: str | None = None, tls_key: str | None = None,
                             limits: EdgeLimits = _NO_CAP
                             ) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    """Bind and start the gRPC ingress, with the edge's `limits` (max_connections
    resolved: grpc_edge.py); OSError when it cannot listen."""
    # Requests as large as replicas take, no larger (gRPC refuses the rest
    # with RESOURCE_EXHAUSTED naming the limit); answers as large as the
    # proxy takes from replicas (dataplane/grpc_forward.py).
    # The port's own services parse their requests through a Guard: garbage
    # gets INVALID_ARGUMENT, where gRPC's own parsing answers UNKNOWN.
    server = grpc.aio.server(
        interceptors=[Guard(HEALTH_SERVICE), Guard(INGRESS_SERVICE)],
        options=[("grpc.so_reuseport", 0), *ingress_options(limits)])
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    ingress_pb2_grpc.add_IngressServiceServicer_to_server(IngressService(proxy, routes), server)
    server.add_generic_rpc_handlers((proxy.generic_handler(),))
    try:
        if tls_cert and tls_key:
            with open(tls_key, "rb") as k, open(tls_cert, "rb") as c:
                credentials = grpc.ssl_server_credentials([(k.read(), c.read())])
            server.add_secure_port(listen, credentials)
        else:
            server.add_insecure_port(listen)
    except RuntimeError as e:
        raise OSError(f"cannot listen for gRPC on {listen}: {e}") from None
    await server.start()
    await checks.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, checks
