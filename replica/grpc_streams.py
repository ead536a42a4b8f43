"""Client-streaming and bidirectional RPCs at the replica.

The deployment's method for such an RPC gets the call's request messages as
an iterator: an async iterator for `async def` methods and async
generators, a plain iterator for sync methods, which run in the replica's
user threads (each `next` waits there for the next message). A
client-streaming method returns its one response; a bidirectional one
yields its responses (a sync generator is stepped in the user threads, as
for server streaming). `grpc_context` works as for the other shapes.

Admission is every call's (grpc_ingress.py). Once admitted, and before user
code reads a message, the replica sends its initial metadata with
`x-servefleet-admitted`: a proxy holds the client's messages back until
then, so a refused call goes to another replica whole. Flow control is
gRPC's: a message is read when user code asks for the next one, so a slow
method slows its client through every hop's window, and nothing piles up
here. A client that cancels, or a deadline that passes, cancels async user
code at its next await; a thread waiting for a message stops waiting
(its `next` raises) and the call's slot is held until the thread is done.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol

import grpc

from servefleet._private.applications.grpc_servicers import Rpc
from servefleet._private.wire import ADMITTED_METADATA_KEY, STREAM_END_GRACE_S


class StreamIngress(Protocol):
    """What a streaming call needs of the ingress (grpc_ingress.GrpcIngress,
    which imports this module: a protocol, not an import of it). `admit`
    gives the user's method (`.fn`, `.is_async`), its grpc_context, the
    call's span and (for a request stream, none) its parsed request."""

    async def admit(self, rpc: Rpc, context: grpc.aio.ServicerContext,
                    raw: bytes | None = None) -> tuple[Any, Any, Any, Any]: ...

    async def parse_or_abort(self, rpc: Rpc, raw: bytes,
                             context: grpc.aio.ServicerContext) -> Any: ...

    async def call_user(self, target: Any, request: Any, user: Any,
                        on_cancel: Callable[[], None] | None = None) -> Any: ...

    def items(self, rpc: Rpc, result: Any) -> AsyncIterator[Any]: ...

    def accounted(self, rpc: Rpc, context: grpc.aio.ServicerContext, user: Any,
                  served: Any) -> contextlib.AbstractAsyncContextManager[None]: ...


_END = object()
_ADMITTED = ((ADMITTED_METADATA_KEY, "1"),)


class CallEnded(Exception):
    """The call ended (cancelled, deadline) while sync user code waited for a message."""


class BlockingRequests(Iterator[Any]):
    """A call's request messages for sync user code, read from a user thread."""

    def __init__(self, requests: AsyncIterator[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._requests = aiter(requests)
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: concurrent.futures.Future[Any] | None = None
        self._closed = False

    async def _next(self) -> Any:
        return await anext(self._requests, _END)

    def __next__(self) -> Any:
        with self._lock:
            if self._closed:
                raise CallEnded("the call ended")
            pending = self._pending = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
        try:
            item = pending.result()
        except (concurrent.futures.CancelledError, asyncio.CancelledError):
            raise CallEnded("the call ended") from None
        finally:
            with self._lock:
                self._pending = None
        if item is _END:
            raise StopIteration
        return item

    def close(self) -> None:
        """The call is over: a thread waiting for a message stops waiting."""
        with self._lock:
            self._closed = True
            if self._pending is not None:
                self._pending.cancel()


async def _until_cancelled(ingress: StreamIngress, rpc: Rpc, requests: AsyncIterator[bytes],
                           context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    """The request messages, parsed (one that is none ends the call
    INVALID_ARGUMENT); their end is the client's (half-close) only: a
    call cancelled under a read ends them too in gRPC, which would look to
    user code like a complete stream (wire.STREAM_END_GRACE_S)."""
    async for raw in requests:
        yield await ingress.parse_or_abort(rpc, raw, context)
    await asyncio.sleep(STREAM_END_GRACE_S)  # a cancelled call is cancelled here
    if context.cancelled():
        raise asyncio.CancelledError


def request_stream_handler(ingress: StreamIngress, rpc: Rpc) -> grpc.RpcMethodHandler:
    """The grpc.aio handler of a client-streaming or bidirectional RPC."""
    # Messages come as bytes, parsed only once the call is admitted (_until_cancelled).
    kwargs: dict[str, Any] = {"response_serializer": rpc.response_serializer}
    if rpc.response_streaming:
        async def bidirectional(requests: AsyncIterator[Any],
                                context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async with _serving(ingress, rpc, requests, context) as (target, user, given,
                                                                     let_go):
                result = await ingress.call_user(target, given, user, let_go)
                async for item in ingress.items(rpc, result):
                    yield item
        return grpc.stream_stream_rpc_method_handler(bidirectional, **kwargs)

    async def client_streaming(requests: AsyncIterator[Any],
                               context: grpc.aio.ServicerContext) -> Any:
        async with _serving(ingress, rpc, requests, context) as (target, user, given, let_go):
            result = await ingress.call_user(target, given, user, let_go)
            if inspect.isasyncgen(result) or inspect.isgenerator(result):
                raise TypeError(f"{rpc.method} must return its one response "
                                "(client-streaming RPC), it yields")
        return result
    return grpc.stream_unary_rpc_method_handler(client_streaming, **kwargs)


@contextlib.asynccontextmanager
async def _serving(ingress: StreamIngress, rpc: Rpc, requests: AsyncIterator[Any],
                   context: grpc.aio.ServicerContext
                   ) -> AsyncIterator[tuple[Any, Any, Any,
                                            Callable[[], None] | None]]:
    """Admit the call, say so, and account for it; yields the user method,
    its grpc_context, the requests in the form it takes, and what lets a
    thread waiting for a request go."""
    target, user, served, _ = await ingress.admit(rpc, context)
    await context.send_initial_metadata(_ADMITTED)
    blocking = None
    requests = _until_cancelled(ingress, rpc, requests, context)
    given: Any = requests
    if not (target.is_async or inspect.isasyncgenfunction(target.fn)):
        given = blocking = BlockingRequests(requests, asyncio.get_running_loop())
    try:
        async with ingress.accounted(rpc, context, user, served):
            yield target, user, given, None if blocking is None else blocking.close
    finally:
        if blocking is not None:
            blocking.close()
