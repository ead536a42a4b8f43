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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

import grpc

from servefleet._private.security.hop_client import HOP_PASS
from servefleet._private.security.hop_tls import REPLICA_SERVER_NAME
from servefleet._private.security.tls import TlsFiles
from servefleet._private.tracing import spans as tracing
from servefleet._private.wire import GRPC_MAX_REQUEST_BYTES, REJECTED_METADATA_KEY

from .balancer import Replica, ReplicaPool
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
    """One channel per replica gRPC address, made on first use: mutual TLS
    with `tls` (this process's certificate; the replica's must name
    `replica.servefleet`) to the addresses said to serve it, plain to others."""

    def __init__(self, tls: TlsFiles | None = None) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._calls: dict[tuple[str, str, str], Any] = {}
        self._closing: set[Any] = set()
        self._credentials = tls.channel_credentials() if tls is not None else None
        self._tls: set[str] = set()

    def serves_tls(self, address: str, tls: bool) -> None:
        """Whether the replica at `address` serves TLS (ReplicaEndpoint.http_tls):
        a change drops the channel made the other way."""
        if tls != (address in self._tls):
            self.forget(address)
            if tls:
                self._tls.add(address)
                if self._credentials is None:
                    logger.warning("the replica at %s serves gRPC with TLS, but this proxy "
                                   "has no cluster certificate (--certs): calls to it fail",
                                   address)

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address in self._tls and self._credentials is not None:
            return grpc.aio.secure_channel(
                address, self._credentials,
                options=[*_OPTIONS, ("grpc.ssl_target_name_override", REPLICA_SERVER_NAME)])
        return grpc.aio.insecure_channel(address, options=_OPTIONS)

    def call(self, address: str, method: str, unary: bool = False,
             requests: bool = False) -> Any:
        """A multicallable for raw bytes on `method` at `address`: unary-unary,
        unary-stream (which serves unary RPCs too, at some cost), or with
        `requests` stream-stream (any shape whose requests stream)."""
        key = (address, method, "requests" if requests else "unary" if unary else "responses")
        found = self._calls.get(key)
        if found is None:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = self._channel(address)
            found = (channel.stream_stream(method) if requests
                     else channel.unary_unary(method) if unary else channel.unary_stream(method))
            if len(self._calls) < _MAX_CACHED_CALLS:  # clients choose the method names
                self._calls[key] = found
        return found

    def forget(self, address: str) -> None:
        """The replica left: close its channel (calls still on it finish first)."""
        channel = self._channels.pop(address, None)
        self._tls.discard(address)
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


def not_processed(code: grpc.StatusCode, details: str | None,
                  trailing: Iterable[tuple[str, Any]] | None) -> NotProcessed | None:
    """Why a call ending with this status never reached user code; None if it may have."""
    reason = next((v for k, v in trailing or () if k == REJECTED_METADATA_KEY), None)
    if reason is not None:
        return NotProcessed(str(reason), refused=False)
    # A status the replica sent names the request in its trailing metadata;
    # one that gRPC made up here for a failed connection carries none.
    if code == grpc.StatusCode.UNAVAILABLE and not trailing and any(
            f in (details or "").lower() for f in _CONNECT_FAILURES):
        return NotProcessed(f"unreachable: {details}", refused=True)
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

    def cancel(self) -> None:
        """End the replica's call unless it ended."""
        if not self._call.done():
            self._call.cancel()


# Opens a call at a replica with the hop's metadata; returns its answer once
# its first message or status came (NotProcessed, CallFailed otherwise).
Opener = Callable[[ReplicaPool, Replica, Metadata], Awaitable[Answer]]


async def forward_grpc(pool: ReplicaPool, channels: GrpcChannels, method: str, request: bytes,
                       metadata: Metadata, timeout: float | None,
                       relay: Callable[[Answer], Awaitable[None]], request_id: str = "",
                       unary: bool = False, routing_key: str = "") -> None:
    """Send the call to a replica of `pool` and `relay` its answer. `unary`:
    the RPC is known to answer one message (a cheaper call).

    Raises `Overloaded` (from the pool), `NoReplicaTook`, `CallFailed` (the
    replica's error status, before any message) and what `relay` raises.
    """
    async def open_call(pool: ReplicaPool, replica: Replica, hop: Metadata) -> Answer:
        call = channels.call(replica.grpc_address, method, unary)(
            request, metadata=hop, timeout=timeout)
        sent_at = pool.clock()
        watched = int(unary)  # passive health: unary calls only
        replica.awaiting += watched
        try:
            first = (await call) if unary else (await call.read())
        except grpc.aio.AioRpcError as e:
            skipped = not_processed(e.code(), e.details(), e.trailing_metadata())
            if skipped is not None:
                raise skipped from None
            if watched and e.code() not in _NOT_ANSWERS:
                pool.note_answer(replica, sent_at)  # an error status is an answer
            raise CallFailed(e.code(), e.details() or "",
                             tuple(e.trailing_metadata() or ())) from None
        except BaseException:
            call.cancel()
            raise
        finally:
            replica.awaiting -= watched
        if watched:
            pool.note_answer(replica, sent_at)
        return Answer(call, first, unary)

    await forward_with_retries(pool, method, metadata, open_call, relay, request_id,
                               routing_key)


async def forward_with_retries(pool: ReplicaPool, method: str, metadata: Metadata,
                               open_call: Opener, relay: Callable[[Answer], Awaitable[None]],
                               request_id: str, routing_key: str) -> None:
    """Open the call at a replica of `pool`, on another one while none
    processed it, and `relay` the answer of the one that did."""
    tried: set[str] = set()
    routing = None if pool.router is None else RequestInfo("", routing_key, "POST", method)
    attempt = spent = 0
    while spent < MAX_ATTEMPTS:  # tries of leaving replicas are free (forward.py)
        attempt += 1
        replica = await pool.acquire(exclude=tried, routing=routing)
        answer = None
        span = tracing.child("send to replica", {
            "servefleet.replica": replica.replica_id, "servefleet.attempt": attempt,
            "server.address": replica.grpc_address}, kind="CLIENT")
        skipped = ""
        try:
            if not replica.grpc_address:
                raise NotProcessed("it serves no gRPC (yet)", refused=False)
            hop = [*metadata, *HOP_PASS.metadata, *((k.decode(), v.decode("latin-1"))
                                                     for k, v in tracing.hop_headers(span))]
            answer = await open_call(pool, replica, hop)
            await relay(answer)
            return
        except NotProcessed as e:
            skipped = str(e)
            spent += set_aside(pool, replica, tried, retry_reason(e.refused, skipped))
            logger.info("gRPC call %s not processed by %s (%s); attempt %d", request_id,
                        replica.replica_id, e, attempt)
        finally:
            if answer is not None:
                answer.cancel()  # the caller left, or relay failed: the replica stops too
            pool.release(replica)
            tracing.end(span, None, {"servefleet.retry.reason": skipped})
    raise NoReplicaTook(f"no replica took the call after {MAX_ATTEMPTS} attempts")
