"""The replica's gRPC face: the user's own services, served from the deployment's methods.

The deployment's settings name generated `add_XServicer_to_server`
functions (servefleet/_private/applications/grpc_servicers.py learns their RPCs). Each RPC
`/package.Service/Method` calls the deployment's method `Method` with the
request message: it returns the response message (unary) or yields messages
(server streaming); `async def` runs on the loop, plain methods in the
replica's thread pool, as for HTTP. A method that takes a `grpc_context`
parameter gets a `GrpcContext` to read the call's metadata and set its own
status code, details and trailing metadata (Ray Serve's shape). Client and
bidirectional streaming RPCs: grpc_streams.py.

Admission is the HTTP side's (one count of requests in flight): a call
refused before user code (overloaded, loading, draining) gets
RESOURCE_EXHAUSTED with the trailing metadata `x-servefleet-rejected`,
meaning "never processed": the caller may send it to another replica (the
proxy does; proxyless xDS clients do by the route's retry policy).
A user exception is UNKNOWN with its message (UNAVAILABLE when it says a
deployment the code called could not serve: DeploymentUnavailableError,
BackPressureError). A call the client cancels,
or whose deadline passes, cancels async user code at its next await; a
thread running sync code keeps the call's slot until it is done.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from servefleet._private.applications.grpc_servicers import Rpc, rpcs_of
from servefleet._private.handle_errors import unserved
from servefleet._private.observability.logs import REQUEST_ID, new_request_id
from servefleet._private.security.hop import HOP_HEADER
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import REJECTED_METADATA_KEY, REQUEST_ID_METADATA_KEY

from .grpc_streams import request_stream_handler
from .hop_gate import HopGate, metadata_without_pass
from .http import Admission
from .loader import UserDeployment
from .metrics import ReplicaMetrics
from .user_calls import in_thread, is_async_callable, traced

logger = logging.getLogger(__name__)
_END = object()
# Every refusal is RESOURCE_EXHAUSTED: proxyless xDS clients retry that code
# on another replica (the route's retry policy, controller/xds/resources.py).
_REFUSED = grpc.StatusCode.RESOURCE_EXHAUSTED


class GrpcContext:
    """What a user method taking `grpc_context` gets: the call's metadata in,
    its status code, details and trailing metadata out."""

    def __init__(self, metadata: Sequence[tuple[str, Any]], deadline: float | None) -> None:
        self._metadata = tuple(metadata)
        self._deadline = deadline
        self._code = grpc.StatusCode.OK
        self._details = ""
        self._trailing: tuple[tuple[str, Any], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._metadata

    def time_remaining(self) -> float | None:
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def set_details(self, details: str) -> None:
        self._details = details

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, metadata: Sequence[tuple[str, Any]]) -> None:
        self._trailing = tuple(metadata)

    def trailing_metadata(self) -> tuple[tuple[str, Any], ...]:
        return self._trailing


def _hop(metadata: Any) -> str | None:
    """The caller's hop pass among a call's metadata."""
    return next((str(v) for k, v in metadata or () if k == HOP_HEADER), None)


def _takes_context(fn: Any) -> bool:
    try:
        return "grpc_context" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


@dataclass(frozen=True)
class _Target:
    fn: Callable[..., Any]
    takes_context: bool
    is_async: bool


class GrpcIngress:
    """The generic handler of the replica's gRPC server."""

    def __init__(self, admission: Admission, executor: Any, replica_id: str,
                 metrics: ReplicaMetrics) -> None:
        self.admission = admission
        self.executor = executor
        self.replica_id = replica_id
        self.metrics = metrics
        self.deployment: UserDeployment | None = None
        # Who may call (hop_gate.py); None: anyone (a cluster without credentials).
        self.hop_gate: HopGate | None = None
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._targets: dict[str, _Target] = {}

    def register(self, servicer_functions: list[str], working_dir: str) -> list[str]:
        """Learn the RPCs of the generated functions; returns the service names.
        Raises LoadError naming a function that is not one."""
        services: list[str] = []
        for path in servicer_functions:
            for rpc in rpcs_of(path, working_dir):
                self._handlers[rpc.path] = self._handler(rpc)
                if rpc.service not in services:
                    services.append(rpc.service)
        return services

    def generic_handler(self) -> grpc.GenericRpcHandler:
        """For the server, made before the user's code is loaded: until then
        every call is refused as "loading" (never processed)."""
        ingress = self

        async def refuse(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await ingress._admit_or_abort(context)

        # Reads no message: a call whose requests stream gets the refusal at once.
        refusing: grpc.RpcMethodHandler = grpc.stream_stream_rpc_method_handler(refuse)

        class Handler(grpc.GenericRpcHandler):
            def service(self, call: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
                if ingress.deployment is None:
                    return refusing
                found = ingress._handlers.get(call.method)
                # A caller the gate refuses learns nothing, not even which methods exist.
                if found is None and ingress.hop_gate is not None and \
                        ingress.hop_gate.refusal(_hop(call.invocation_metadata)) is not None:
                    return refusing
                return found

        return Handler()

    def _handler(self, rpc: Rpc) -> grpc.RpcMethodHandler:
        # Messages come as bytes, parsed here after the gate (parse_or_abort).
        kwargs = {"response_serializer": rpc.response_serializer}
        if rpc.request_streaming:
            return request_stream_handler(self, rpc)
        if rpc.response_streaming:
            async def stream(raw: bytes, context: grpc.aio.ServicerContext
                             ) -> AsyncIterator[Any]:
                async for item in self._serve_stream(rpc, raw, context):
                    yield item
            return grpc.unary_stream_rpc_method_handler(stream, **kwargs)

        async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            return await self._serve_unary(rpc, raw, context)
        return grpc.unary_unary_rpc_method_handler(unary, **kwargs)

    # -- per call ------------------------------------------------------------------

    async def parse_or_abort(self, rpc: Rpc, raw: bytes,
                             context: grpc.aio.ServicerContext) -> Any:
        """A request message of `rpc`, parsed once its caller passed the gate;
        one that is none is INVALID_ARGUMENT naming the message type (gRPC's
        own parsing answered UNKNOWN and logged a traceback)."""
        parse = rpc.request_deserializer
        if parse is None:
            return raw
        try:
            return parse(raw)
        except DecodeError as e:
            kind = getattr(getattr(getattr(parse, "__self__", None), "DESCRIPTOR", None),
                           "full_name", "request")
            logger.warning("gRPC call %s: the request is not a valid %s: %s", rpc.path, kind, e)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"the request is not a valid {kind}: {e}")

    async def _admit_or_abort(self, context: grpc.aio.ServicerContext) -> None:
        if self.hop_gate is not None:
            refused = self.hop_gate.refusal(_hop(context.invocation_metadata()))
            if refused is not None:
                self.metrics.rejected["unauthenticated"].inc()
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, refused)
        reason = self.admission.refusal() if self.deployment is not None else "loading"
        if reason is not None:
            self.metrics.rejected[reason].inc()
            await context.abort(_REFUSED, f"replica {self.replica_id} is {reason}",
                                trailing_metadata=((REJECTED_METADATA_KEY, reason),))

    def _target(self, rpc: Rpc) -> _Target | None:
        """The user's method for `rpc` and how to call it, found once."""
        found = self._targets.get(rpc.path)
        if found is None:
            deployment = self.deployment
            assert deployment is not None, "admission lets calls in only once loaded"
            fn = getattr(deployment.instance, rpc.method, None)
            if not callable(fn) or inspect.isclass(deployment.instance):
                return None
            found = self._targets[rpc.path] = _Target(fn, _takes_context(fn),
                                                      is_async_callable(fn))
        return found

    async def admit(self, rpc: Rpc, context: grpc.aio.ServicerContext, raw: bytes | None = None
                    ) -> tuple[_Target, GrpcContext | None, tracing.Served | None, Any]:
        """Gate and admission, then the call's request parsed from `raw`
        (None for a request stream), its target, grpc_context and span."""
        await self._admit_or_abort(context)
        request = None if raw is None else await self.parse_or_abort(rpc, raw, context)
        target = self._target(rpc)
        if target is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED,
                                f"the deployment has no method {rpc.method} for {rpc.path}")
            raise AssertionError("not reached")
        metadata = context.invocation_metadata() or ()
        request_id = str(next((v for k, v in metadata if k == REQUEST_ID_METADATA_KEY), "")
                         ) or new_request_id()
        REQUEST_ID.set(request_id)
        served = tracing.serve(rpc.path.lstrip("/"), tracing.incoming(metadata), {
            **self.metrics.span_attributes, "rpc.system": "grpc", "rpc.method": rpc.method,
            "servefleet.request_id": request_id})
        if not target.takes_context:
            return target, None, served, request
        remaining = context.time_remaining()
        return target, GrpcContext(metadata_without_pass(metadata), None if remaining is None
                                   else time.monotonic() + remaining), served, request

    async def _finish(self, user: GrpcContext | None,
                      context: grpc.aio.ServicerContext) -> None:
        if user is None:
            return
        if user.trailing_metadata():
            context.set_trailing_metadata(user.trailing_metadata())
        if user.code() != grpc.StatusCode.OK:
            await context.abort(user.code(), user.details())

    async def call_user(self, target: _Target, request: Any, user: GrpcContext | None,
                        on_cancel: Callable[[], None] | None = None) -> Any:
        """Run the user's method (sync ones in a user thread, which keeps the
        call's slot until done; `on_cancel` lets it go of what it waits for)."""
        fn = target.fn
        kwargs = {"grpc_context": user} if user is not None else {}
        if target.is_async:
            return await traced(fn(request, **kwargs))
        ctx = contextvars.copy_context()
        work = in_thread(functools.partial(fn, request, **kwargs))
        thread = asyncio.get_running_loop().run_in_executor(self.executor,
                                                            lambda: ctx.run(work))
        try:
            result = await asyncio.shield(thread)
        except asyncio.CancelledError:
            if on_cancel is not None:
                on_cancel()
            await asyncio.wait({thread})  # the slot is held until the thread is done
            raise
        return (await result) if inspect.isawaitable(result) else result

    @contextlib.asynccontextmanager
    async def accounted(self, rpc: Rpc, context: grpc.aio.ServicerContext,
                        user: GrpcContext | None, served: tracing.Served | None
                        ) -> AsyncIterator[None]:
        """An admitted call's time in user code: its slot, metrics and span;
        user code raising ends the call UNKNOWN, a cancellation is passed on."""
        self.admission.ongoing += 1
        started = time.perf_counter()
        failed: BaseException | None = None
        try:
            try:
                yield
            except asyncio.CancelledError:
                logger.info("gRPC call %s cancelled (client left or deadline passed)", rpc.path)
                raise
            except grpc.aio.AbortError:
                raise  # ended with its status already (a request message that is none)
            except Exception as e:
                failed = e
                await self.failed(rpc, context, e)
            await self.succeeded(started, user, context)
        finally:
            self.admission.ongoing -= 1
            if served is not None:
                served.finish(0, failed)  # user code's exception on it; the status is gRPC's

    async def _serve_unary(self, rpc: Rpc, raw: bytes,
                           context: grpc.aio.ServicerContext) -> Any:
        target, user, served, request = await self.admit(rpc, context, raw)
        async with self.accounted(rpc, context, user, served):
            return await self.call_user(target, request, user)

    async def _serve_stream(self, rpc: Rpc, raw: bytes,
                            context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        target, user, served, request = await self.admit(rpc, context, raw)
        async with self.accounted(rpc, context, user, served):
            async for item in self.items(rpc, await self.call_user(target, request, user)):
                yield item

    async def items(self, rpc: Rpc, result: Any) -> AsyncIterator[Any]:
        """What a server-streaming method yields (sync generators step in the pool)."""
        if inspect.isasyncgen(result):
            async for item in result:
                yield item
        elif inspect.isgenerator(result) or isinstance(result, list | tuple):
            items = iter(result)
            loop = asyncio.get_running_loop()
            while (item := await loop.run_in_executor(self.executor, next, items,
                                                      _END)) is not _END:
                yield item
        else:
            raise TypeError(f"{rpc.method} must yield its responses (server-streaming "
                            f"RPC), returned {type(result).__name__}")

    async def failed(self, rpc: Rpc, context: grpc.aio.ServicerContext,
                      error: Exception) -> None:
        """User code raised: UNKNOWN with the exception (abort raises); UNAVAILABLE
        when a deployment it called could not serve (handle_errors.unserved), named
        with the request id so that no caller takes the status for its own
        failure to connect (grpc_forward.not_processed)."""
        self.metrics.error.inc()
        text = f"{type(error).__name__}: {error}"
        if unserved(error):
            logger.warning("gRPC call %s: %s", rpc.path, text)
            await context.abort(grpc.StatusCode.UNAVAILABLE, text,
                                ((REQUEST_ID_METADATA_KEY, REQUEST_ID.get() or "-"),))
        logger.exception("gRPC call %s failed in user code", rpc.path)
        await context.abort(grpc.StatusCode.UNKNOWN, text)

    async def succeeded(self, started: float, user: GrpcContext | None,
                         context: grpc.aio.ServicerContext) -> None:
        self.metrics.ok.inc()
        self.metrics.duration.observe(time.perf_counter() - started)
        await self._finish(user, context)
