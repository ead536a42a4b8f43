"""Forward-with-retry for gRPC calls: forward.py's loop, with gRPC's framing.

A call is forwarded as raw bytes (no user protos here): one request message,
any number of response messages, which on the wire serves unary and
server-streaming RPCs alike. Per attempt the deployment's pool gives a
replica with room (balancer.py, shared with HTTP); the call goes to its gRPC
address over a channel kept per replica (`GrpcChannels`). A call the replica
never processed is tried on another one:

- it answered with the trailing metadata `x-servefleet-rejected` (it was
  loading, draining or full), or
- the channel could not connect (the replica is gone).

As in forward.py, a replica that is leaving (draining, unreachable) is set
aside until the next replica set at no attempt's cost, and the call waits for
that set when nothing else can take it; MAX_ATTEMPTS bounds the other tries.

Anything else, once the first answer (a message or a status) came, is the
replica's answer and goes to `relay`. Unary calls feed passive health
(balancer.py) as HTTP requests do: awaited from sending until their answer,
so a replica that holds them and answers nothing while others answer is
ejected (or, the pool's last one, reported to the controller). Streaming
calls do not: their first message may come late by design. A failure after the call may have
reached the replica is not retried. Cancelling the caller cancels the call to
the replica; the deadline given is the replica's deadline too.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc

from servefleet._private import tracing
from servefleet._private.wire import GRPC_MAX_REQUEST_BYTES, REJECTED_METADATA_KEY

from .balancer import ReplicaPool
from .forward import MAX_ATTEMPTS, NoReplicaTook, set_aside
from .metrics import retry_reason
from .routers import RequestInfo

logger = logging.getLogger(__name__)
Metadata = Sequence[tuple[str, str | bytes]]
# What a channel that cannot reach its replica reports (grpc-core's wording).
_CONNECT_FAILURES = ("failed to connect", "connection refused", "connections to all backends",
                     "dns resolution failed")
_MAX_CACHED_CALLS = 4096
# Statuses that come from this side, not from the replica.
_NOT_ANSWERS = (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
# Answers from replicas up to 64 MiB (gRPC's default is 4), which the proxy's
# ingress sends on; requests up to what replicas take (servefleet/_private/wire.py).
GRPC_MAX_ANSWER_BYTES = 64 * 1024 * 1024
# Retries are this module's to do.
_OPTIONS = [("grpc.max_receive_message_length", GRPC_MAX_ANSWER_BYTES),
            ("grpc.max_send_message_length", GRPC_MAX_REQUEST_BYTES),
            ("grpc.enable_retries", 0)]


class GrpcChannels:
    """One insecure channel per replica gRPC address, made on first use."""

    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._calls: dict[tuple[str, str, bool], Any] = {}
        self._closing: set[Any] = set()

    def call(self, address: str, method: str, unary: bool = False) -> Any:
        """A multicallable for raw bytes on `method` at `address`: unary-unary,
        or unary-stream (which serves unary RPCs too, at some cost)."""
        found = self._calls.get((address, method, unary))
        if found is None:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = grpc.aio.insecure_channel(address,
                                                                              options=_OPTIONS)
            found = channel.unary_unary(method) if unary else channel.unary_stream(method)
            if len(self._calls) < _MAX_CACHED_CALLS:  # clients choose the method names
                self._calls[(address, method, unary)] = found
        return found

    def forget(self, address: str) -> None:
        """The replica left: close its channel (calls still on it finish first)."""
        channel = self._channels.pop(address, None)
        for key in [k for k in self._calls if k[0] == address]:
            del self._calls[key]
        if channel is not None:
            task = asyncio.ensure_future(channel.close(grace=30.0))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close(grace=None)
        self._channels.clear()
        self._calls.clear()


class NotProcessed(Exception):
    """The replica did not process the call; the reason says why."""

    def __init__(self, reason: str, refused: bool) -> None:
        super().__init__(reason)
        self.refused = refused  # the replica could not be reached


class CallFailed(Exception):
    """The replica's answer was an error status (or the call broke)."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Metadata) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details, self.trailing = code, details, trailing


def _not_processed(error: grpc.aio.AioRpcError) -> NotProcessed | None:
    trailing = error.trailing_metadata() or ()
    reason = next((v for k, v in trailing if k == REJECTED_METADATA_KEY), None)
    if reason is not None:
        return NotProcessed(str(reason), refused=False)
    details = (error.details() or "").lower()
    if error.code() == grpc.StatusCode.UNAVAILABLE and any(
            f in details for f in _CONNECT_FAILURES):
        return NotProcessed(f"unreachable: {error.details()}", refused=True)
    return None


class Answer:
    """A replica's answer to a call, once its first message or status came
    (for a unary call, its only message)."""

    def __init__(self, call: Any, first: Any, unary: bool = False) -> None:
        self._call, self._first, self._unary = call, first, unary

    @property
    def first(self) -> bytes | None:
        """The first message; None when there was none."""
        return None if self._first is grpc.aio.EOF else self._first

    async def messages(self) -> AsyncIterator[bytes]:
        """The response messages; CallFailed when the call ends with an error."""
        if self._first is grpc.aio.EOF:
            return
        yield self._first
        if self._unary:
            return
        try:
            while (message := await self._call.read()) is not grpc.aio.EOF:
                yield message
        except grpc.aio.AioRpcError as e:
            raise CallFailed(e.code(), e.details() or "", tuple(e.trailing_metadata() or ())
                             ) from None

    async def trailing_metadata(self) -> Metadata:
        return tuple(await self._call.trailing_metadata() or ())


async def forward_grpc(pool: ReplicaPool, channels: GrpcChannels, method: str, request: bytes,
                       metadata: Metadata, timeout: float | None,
                       relay: Callable[[Answer], Awaitable[None]], request_id: str = "",
                       unary: bool = False, routing_key: str = "") -> None:
    """Send the call to a replica of `pool` and `relay` its answer. `unary`:
    the RPC is known to answer one message (a cheaper call).

    Raises `Overloaded` (from the pool), `NoReplicaTook`, `CallFailed` (the
    replica's error status, before any message) and what `relay` raises.
    """
    tried: set[str] = set()
    routing = None if pool.router is None else RequestInfo("", routing_key, "POST", method)
    attempt = spent = 0
    while spent < MAX_ATTEMPTS:  # tries of leaving replicas are free (forward.py)
        attempt += 1
        replica = await pool.acquire(exclude=tried, routing=routing)
        call = None
        span = tracing.child("send to replica", {
            "servefleet.replica": replica.replica_id, "servefleet.attempt": attempt,
            "server.address": replica.grpc_address}, kind="CLIENT")
        not_processed = ""
        try:
            if not replica.grpc_address:
                raise NotProcessed("it serves no gRPC (yet)", refused=False)
            hop = [*metadata, *((k.decode(), v.decode("latin-1"))
                                for k, v in tracing.hop_headers(span))]
            call = channels.call(replica.grpc_address, method, unary)(
                request, metadata=hop, timeout=timeout)
            sent_at = pool.clock()
            watched = int(unary)  # passive health: unary calls only
            replica.awaiting += watched
            try:
                first = (await call) if unary else (await call.read())
            except grpc.aio.AioRpcError as e:
                skipped = _not_processed(e)
                if skipped is not None:
                    raise skipped from None
                if watched and e.code() not in _NOT_ANSWERS:
                    pool.note_answer(replica, sent_at)  # an error status is an answer
                raise CallFailed(e.code(), e.details() or "",
                                 tuple(e.trailing_metadata() or ())) from None
            finally:
                replica.awaiting -= watched
            if watched:
                pool.note_answer(replica, sent_at)
            await relay(Answer(call, first, unary))
            return
        except NotProcessed as e:
            not_processed = str(e)
            spent += set_aside(pool, replica, tried, retry_reason(e.refused, not_processed))
            logger.info("gRPC call %s not processed by %s (%s); attempt %d", request_id,
                        replica.replica_id, e, attempt)
        finally:
            if call is not None and not call.done():
                call.cancel()  # the caller left, or relay failed: the replica stops too
            pool.release(replica)
            tracing.end(span, None, {"servefleet.retry.reason": not_processed})
    raise NoReplicaTook(f"no replica took the call after {MAX_ATTEMPTS} attempts")
