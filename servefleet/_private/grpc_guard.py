"""A server interceptor that parses requests itself and checks each call first.

gRPC answers a request that is no valid protobuf with UNKNOWN and a message
about the server; `Guard` parses requests itself and answers such a request
INVALID_ARGUMENT naming the message type. Before the handler runs, it awaits
`check(method, request, context)` (for client-streaming methods the request
is None): the check authorises the caller and raises `Refused` to answer
with a status instead. The wrapped handlers are built once per method.

Used by the controller's API (with the role check of controller/api/auth.py)
and by each replica's control server (only controllers may call it).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

if TYPE_CHECKING:  # generic only in the stubs
    Handler = grpc.RpcMethodHandler[Any, Any]

Check = Callable[[str, Any, grpc.aio.ServicerContext], Awaitable[None]]


class Refused(Exception):
    """Answer the call with `code` and `message` instead of running it."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _refuse(context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str) -> None:
    context.set_code(code)
    context.set_details(message)


async def relayed(answers: Any) -> AsyncIterator[Any]:
    """What a server-streaming handler answers: its items, or none for a
    handler that writes them itself (context.write) and returns a coroutine."""
    if not hasattr(answers, "__aiter__"):
        await answers
        return
    async for item in answers:
        yield item


def guarded(handler: Handler, method: str, check: Check | None) -> Handler:
    """`handler`, with requests parsed here and `check` awaited before it runs."""
    parse = handler.request_deserializer
    if parse is None:
        return handler
    kind = getattr(getattr(parse, "__self__", None), "__name__", "request")

    async def parsed(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        try:
            return parse(raw)
        except DecodeError as e:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"the request is not a valid {kind}: {e}")

    async def admitted(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
        """The parsed request, or None with the refusal's status set. Set, not
        aborted with: grpc.aio keeps what an abort's frames hold, a request of
        megabytes among them, for good."""
        try:
            request = parse(raw)
        except DecodeError as e:
            _refuse(context, grpc.StatusCode.INVALID_ARGUMENT,
                    f"the request is not a valid {kind}: {e}")
            return None
        del raw
        if not await checked(request, context):
            return None
        return request

    async def checked(request: Any, context: grpc.aio.ServicerContext) -> bool:
        """Whether the call may go on; with the refusal's status set if not."""
        if check is None:
            return True
        try:
            await check(method, request, context)
        except Refused as e:
            _refuse(context, e.code, e.message)
            return False
        return True

    respond = handler.response_serializer
    # The stubs type the behaviours as sync gRPC's; on the aio server they are coroutines.
    call: Any = handler.unary_unary
    stream: Any = handler.unary_stream
    take: Any = handler.stream_unary
    if call is not None:

        async def unary(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            request = await admitted(raw, context)
            return None if request is None else await call(request, context)

        return grpc.unary_unary_rpc_method_handler(unary, response_serializer=respond)
    if stream is not None:

        async def streaming(raw: bytes, context: grpc.aio.ServicerContext) -> Any:
            request = await admitted(raw, context)
            if request is None:
                return
            async for item in relayed(stream(request, context)):
                yield item

        return grpc.unary_stream_rpc_method_handler(streaming, response_serializer=respond)
    if take is not None:

        async def taking(raws: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> Any:
            if not await checked(None, context):
                return None

            async def requests() -> AsyncIterator[Any]:
                async for raw in raws:  # parsed inline: a coroutine per message costs
                    try:
                        request = parse(raw)
                    except DecodeError:
                        await parsed(raw, context)  # aborts, naming the message type
                    yield request

            try:
                return await take(requests(), context)
            finally:
                # gRPC keeps the last message of a request stream its handler
                # stopped reading (about 0.65 MB for a refused StreamLoad).
                with contextlib.suppress(RuntimeError, AttributeError):
                    await raws.__aiter__().aclose()  # type: ignore[attr-defined]

        return grpc.stream_unary_rpc_method_handler(taking, response_serializer=respond)
    return handler


class Guard(grpc.aio.ServerInterceptor):
    """Guards every method of `service` (its full name); others pass untouched."""

    def __init__(self, service: str, check: Check | None = None) -> None:
        self._prefix = f"/{service}/"
        self._check = check
        # method -> (the servicer's handler, the guarded one)
        self._guarded: dict[str, tuple[Handler, Handler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or not method.startswith(self._prefix):
            return handler
        wrapped = self._guarded.get(method)
        if wrapped is None or wrapped[0] is not handler:
            name = method[len(self._prefix):]
            wrapped = self._guarded[method] = (handler, guarded(handler, name, self._check))
        return wrapped[1]
