"""Where a process refuses revoked certificates (revocation.py): its TLS
servers (`refuse_revoked` on an `ssl.SSLContext`) and its gRPC servers
(`RevokedCertInterceptor`).

Python's `ssl` calls no hook of ours while it verifies a peer; the peer's
certificate is known once the handshake is done. So the context's
`sslobject_class` (the object asyncio's and uvloop's TLS transports wrap each
connection in) checks the serial right after the handshake and fails it as a
verification error: the connection is closed before its first byte reaches
the application. It checks again on the connection's next read or write
after the list changed: a kept-alive connection, a stream or a WebSocket of
a certificate revoked later ends there.

gRPC's C core does the handshake itself: the interceptor checks each call's
peer (`peer_serial`, parsed once per certificate) before its handler, and
ends the calls in progress, streams included, whose certificate a new list
names: their clients get UNAUTHENTICATED.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar

import grpc

from servefleet._private.grpc_guard import relayed

from .revocation import RevokedSerials, parse_serial
from .tls import peer_serial

if TYPE_CHECKING:  # generic only in the stubs
    Handler = grpc.RpcMethodHandler[Any, Any]

logger = logging.getLogger(__name__)


def refusal(serial: str) -> str:
    return f"the certificate with serial {serial} is revoked"


class _CheckedSSLObject(ssl.SSLObject):
    """One TLS connection whose peer certificate's serial is checked."""

    revoked: ClassVar[RevokedSerials]
    _serial: str | None = None
    _checked = -1  # the list's generation last checked against

    def do_handshake(self) -> None:
        super().do_handshake()
        cert = self.getpeercert()
        self._serial = parse_serial(str(cert["serialNumber"])) if cert else None
        self._check()

    def _check(self) -> None:
        self._checked = self.revoked.generation
        if self._serial is not None and self._serial in self.revoked:
            if self.revoked.first_refusal(self._serial):
                logger.warning("refused a TLS connection: %s", refusal(self._serial))
            raise ssl.SSLCertVerificationError(refusal(self._serial))

    def read(self, len: int = 1024, buffer: Any = None) -> Any:
        if self._checked != self.revoked.generation:
            self._check()
        return super().read(len, buffer)

    def write(self, data: Any) -> int:
        if self._checked != self.revoked.generation:
            self._check()
        return super().write(data)


def refuse_revoked(context: ssl.SSLContext, revoked: RevokedSerials) -> ssl.SSLContext:
    """`context`, whose connections refuse peers with certificates `revoked` lists."""
    context.sslobject_class = type("RevocationCheckedSSLObject", (_CheckedSSLObject,),
                                   {"revoked": revoked})
    return context


class RevokedCertInterceptor(grpc.aio.ServerInterceptor):
    """Refuses calls whose client certificate is revoked (UNAUTHENTICATED),
    and ends those in progress when a new list names their certificate."""

    def __init__(self, revoked: RevokedSerials) -> None:
        self._revoked = revoked
        # Calls in progress with a certificate: their task -> (context, serial).
        self._calls: dict[asyncio.Task[Any], tuple[Any, str]] = {}
        # method -> (the servicer's handler, the checked one)
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}
        revoked.on_change(self._end_revoked)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is None or wrapped[0] is not handler:
            wrapped = self._wrapped[method] = (handler, self._checked(handler))
        return wrapped[1]

    def _admit(self, context: grpc.aio.ServicerContext) -> bool:
        """Whether the call may run; with its status set if not. Tracked while it runs."""
        serial = peer_serial(context.auth_context())
        if serial is None:
            return True
        if serial in self._revoked:
            if self._revoked.first_refusal(serial):
                logger.warning("refused a call: %s", refusal(serial))
            context.set_code(grpc.StatusCode.UNAUTHENTICATED)
            context.set_details(refusal(serial))
            return False
        task = asyncio.current_task()
        if task is not None:
            self._calls[task] = (context, serial)
            task.add_done_callback(self._forget)
        return True

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._calls.pop(task, None)

    def _end_revoked(self, added: frozenset[str]) -> None:
        """Listener of the list: may run in another thread than the server's
        loop (a replica's control server has a loop of its own)."""
        for task, (context, serial) in self._calls.copy().items():
            if serial in added:
                logger.info("ending a call: %s", refusal(serial))
                self._calls.pop(task, None)
                loop = task.get_loop()
                loop.call_soon_threadsafe(
                    loop.create_task, _end(task, context, refusal(serial)))

    def _checked(self, handler: Handler) -> Handler:
        """`handler` with `_admit` first, whatever its kind."""
        admit = self._admit
        kinds = {"unary_unary": grpc.unary_unary_rpc_method_handler,
                 "stream_unary": grpc.stream_unary_rpc_method_handler,
                 "unary_stream": grpc.unary_stream_rpc_method_handler,
                 "stream_stream": grpc.stream_stream_rpc_method_handler}
        for kind, make in kinds.items():
            behaviour: Any = getattr(handler, kind)
            if behaviour is None:
                continue
            if kind.endswith("_unary"):

                async def answer(request: Any, context: Any, run: Any = behaviour) -> Any:
                    if not admit(context):
                        return None
                    result = run(request, context)
                    return await result if inspect.isawaitable(result) else result

                checked: Any = answer
            else:

                async def answers(request: Any, context: Any,
                                  run: Any = behaviour) -> AsyncIterator[Any]:
                    if not admit(context):
                        return
                    async for item in relayed(run(request, context)):
                        yield item

                checked = answers
            return make(checked, request_deserializer=handler.request_deserializer,
                        response_serializer=handler.response_serializer)
        return handler


async def _end(task: asyncio.Task[Any], context: Any, why: str) -> None:
    """Finish a call from outside its handler: the status goes to the client
    (cancelling the handler alone leaves the call open), then the handler stops."""
    with contextlib.suppress(Exception):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
    task.cancel()
