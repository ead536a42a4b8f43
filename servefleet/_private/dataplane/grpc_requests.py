"""Forward-with-retry for gRPC calls whose requests stream (client streaming
and bidirectional RPCs), on grpc_forward.py's retry loop.

The client's messages cannot be sent twice, so none is sent before a
replica has taken the call: the call to a replica opens with no message,
and the replica answers with initial metadata `x-servefleet-admitted`
(replica/grpc_streams.py) or refuses with the trailing `x-servefleet-rejected`
(never processed: the next replica is tried, the call whole). Once admitted,
`Exchange` relays both ways until the call ends:

- client → replica, one message at a time: a write waits for the replica
  side's flow-control window, and the next message is not read from the
  client before it is done, so a slow replica slows its client and the proxy
  holds at most one message of a call;
- replica → client, as `Answer` does for the other shapes.

The replica ending the call (its answer, an error, its deadline) ends it for
the client, whose remaining messages are not read; the client cancelling
cancels the replica's call. Streaming calls feed no passive health.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
from grpc._cython import cygrpc  # type: ignore[attr-defined]

from servefleet._private.wire import ADMITTED_METADATA_KEY, STREAM_END_GRACE_S

from .balancer import Replica, ReplicaPool
from .grpc_forward import (
    Answer,
    CallFailed,
    GrpcChannels,
    Metadata,
    forward_with_retries,
    not_processed,
)

logger = logging.getLogger(__name__)


class Exchange(Answer):
    """A replica's call that took the client's: its messages relayed both ways."""

    def __init__(self, call: grpc.aio.StreamStreamCall, requests: AsyncIterator[bytes]) -> None:
        super().__init__(call, grpc.aio.EOF)
        self._requests = requests

    async def messages(self) -> AsyncIterator[bytes]:
        """The replica's messages, while the client's go to it; CallFailed
        when the call ends with an error."""
        call = self._call
        pump = asyncio.ensure_future(self._pump())
        try:
            while (message := await call.read()) is not grpc.aio.EOF:
                yield message
        except grpc.aio.AioRpcError as e:
            raise CallFailed(e.code(), e.details() or "", tuple(e.trailing_metadata() or ())
                             ) from None
        finally:
            pump.cancel()  # the call ended: the client's other messages are not read
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _pump(self) -> None:
        call = self._call
        try:
            async for message in self._requests:
                if not await _send(call, message):
                    return
            # A client that cancelled ends its stream too: its handler is
            # cancelled (and this pump with it) within the grace.
            await asyncio.sleep(STREAM_END_GRACE_S)
            await call.done_writing()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the call ended under a write, or the client's stream broke
            if not call.done():
                logger.info("gRPC call: relaying the client's messages failed (%s: %s)",
                            type(e).__name__, e)
                call.cancel()


async def _send(call: grpc.aio.StreamStreamCall, message: bytes) -> bool:
    """Write one message to the replica; False when the call ended first.

    grpc.aio's own write() turns a send that fails because the replica just
    ended the call into the call's status (INTERNAL "Internal error from
    Core"), hiding the replica's status when the two race (seen 1 in 4 times
    with a replica that ends a bidirectional call while the client sends).
    Its underlying send does not; grpc.aio's write() is the fallback."""
    cython_call = getattr(call, "_cython_call", None)
    if cython_call is None or not hasattr(cython_call, "send_serialized_message"):
        await call.write(message)
        return True
    if call.done():
        return False
    try:
        await cython_call.send_serialized_message(message)
    except cygrpc.InternalError:
        return False  # the call ended: its status says how
    except asyncio.CancelledError:
        if not call.cancelled():
            call.cancel()
        raise
    return True


async def _admitted(call: grpc.aio.StreamStreamCall) -> None:
    """Return once the replica took the call; NotProcessed when it refused or
    could not be reached, CallFailed for another status before admission."""
    initial = await call.initial_metadata()
    if any(k == ADMITTED_METADATA_KEY for k, _ in initial or ()):
        return
    code = await call.code()  # a call not admitted ends without reading a message
    details, trailing = await call.details(), tuple(await call.trailing_metadata() or ())
    skipped = not_processed(code, details, trailing)
    if skipped is not None:
        raise skipped
    if code == grpc.StatusCode.OK:  # not a servefleet replica's way
        raise CallFailed(grpc.StatusCode.UNKNOWN, "the replica ended the call without "
                         "taking it", trailing)
    raise CallFailed(code, details or "", trailing)


async def forward_grpc_requests(pool: ReplicaPool, channels: GrpcChannels, method: str,
                                requests: AsyncIterator[bytes], metadata: Metadata,
                                timeout: float | None,
                                relay: Callable[[Answer], Awaitable[None]],
                                request_id: str = "", routing_key: str = "") -> None:
    """Open the call at a replica of `pool` that takes it, then `relay` the
    exchange. Raises as grpc_forward.forward_grpc does."""
    async def open_call(pool: ReplicaPool, replica: Replica, hop: Metadata) -> Answer:
        call = channels.call(replica.grpc_address, method, requests=True)(
            metadata=hop, timeout=timeout)
        try:
            await _admitted(call)
        except BaseException:
            call.cancel()
            raise
        return Exchange(call, requests)

    await forward_with_retries(pool, method, metadata, open_call, relay, request_id,
                               routing_key)
