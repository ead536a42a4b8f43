"""The etcd store (etcd 3.4+), on etcd's gRPC API.

aetcd provides the generated etcd stubs; the store makes its own channel
(plain, or TLS with a client certificate for `etcds://`) and sends raw etcd
requests: it needs the response header's revision and a one-shot watch with
a start revision and a deadline, which aetcd's client API does not give.

Several endpoints may be given; the store talks to one at a time and moves to
the next when a call fails to connect. Every failure to reach etcd surfaces as
`StoreUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

from servefleet._private.security.tls import Credentials, TlsFiles

from .base import (
    Guard,
    KeyValue,
    LeaseNotFound,
    Op,
    Put,
    StoreUnavailable,
    TxnResult,
    check_disjoint,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _kv(raw: rpc.KeyValue) -> KeyValue:
    return KeyValue(
        key=raw.key.decode(),
        value=bytes(raw.value),
        create_revision=raw.create_revision,
        mod_revision=raw.mod_revision,
        lease=raw.lease,
    )


def _request_op(op: Op) -> rpc.RequestOp:
    if isinstance(op, Put):
        return rpc.RequestOp(
            request_put=rpc.PutRequest(key=op.key.encode(), value=op.value, lease=op.lease)
        )
    key = op.key.encode()
    request = rpc.DeleteRangeRequest(key=key)
    if op.prefix:
        request.range_end = prefix_range_end(key)
    return rpc.RequestOp(request_delete_range=request)


def _compare(guard: Guard) -> rpc.Compare:
    return rpc.Compare(
        key=guard.key.encode(),
        target=rpc.Compare.CREATE,
        result=rpc.Compare.EQUAL,
        create_revision=guard.create_revision,
    )


class _Connection:
    """One channel to one etcd endpoint, with the stubs the store calls."""

    def __init__(self, endpoint: str, tls: TlsFiles | None) -> None:
        self.channel = Credentials(tls).aio_channel(endpoint)
        self.kv = rpc.KVStub(self.channel)
        self.lease = rpc.LeaseStub(self.channel)
        self.watch = rpc.WatchStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()


class EtcdStore:
    """A Store on an etcd cluster reached through `endpoints` ("host:port")."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 3.0,
                 tls: TlsFiles | None = None) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self._endpoints = list(endpoints)
        self._timeout = timeout
        self._tls = tls
        self._index = 0
        self._client: _Connection | None = None
        self._closing: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        """Nothing to check up front: an etcd that is down now may be up later."""

    # -- connection -------------------------------------------------------

    def _connected(self) -> _Connection:
        if self._client is None:
            self._client = _Connection(self._endpoints[self._index], self._tls)
        return self._client

    def _rotate(self, failed: _Connection) -> None:
        """Move on to the next endpoint after `failed` could not be reached.

        The old connection is closed only later: other calls may still be
        running on it, and closing it now would cancel them.
        """
        stale: _Connection = failed  # (not narrowed by the identity test below)
        if self._client is not failed:
            return  # another call already moved on
        self._client = None
        self._index = (self._index + 1) % len(self._endpoints)

        async def close_later() -> None:
            await asyncio.sleep(self._timeout + 1.0)
            with contextlib.suppress(Exception):
                await stale.close()

        self._closing.add(task := asyncio.get_running_loop().create_task(close_later()))
        task.add_done_callback(self._closing.discard)

    async def _call(self, fn: Callable[[_Connection], Awaitable[T]]) -> T:
        client = self._connected()
        try:
            return await fn(client)
        except grpc.aio.AioRpcError as e:
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                self._rotate(client)
                raise StoreUnavailable(f"etcd unreachable: {e.details()}") from e
            if e.code() == grpc.StatusCode.NOT_FOUND and "lease" in (e.details() or ""):
                raise LeaseNotFound(e.details()) from e
            raise

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        for task in list(self._closing):
            task.cancel()

    # -- reads ------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        async def op(c: _Connection) -> KeyValue | None:
            reply = await c.kv.Range(rpc.RangeRequest(key=key.encode()), timeout=self._timeout)
            return _kv(reply.kvs[0]) if reply.kvs else None

        return await self._call(op)

    async def list_prefix(self, prefix: str) -> list[KeyValue]:
        async def op(c: _Connection) -> list[KeyValue]:
            key = prefix.encode()
            request = rpc.RangeRequest(
                key=key,
                range_end=prefix_range_end(key),
                sort_order=rpc.RangeRequest.ASCEND,
                sort_target=rpc.RangeRequest.KEY,
            )
            reply = await c.kv.Range(request, timeout=self._timeout)
            return [_kv(raw) for raw in reply.kvs]

        return await self._call(op)

    async def revision(self) -> int:
        async def op(c: _Connection) -> int:
            # A range over a key nobody writes returns just the header.
            request = rpc.RangeRequest(key=b"\0", count_only=True)
            reply = await c.kv.Range(request, timeout=self._timeout)
            return int(reply.header.revision)

        return await self._call(op)

    # -- writes -----------------------------------------------------------

    async def txn(self, guards: Sequence[Guard], ops: Sequence[Op]) -> TxnResult:
        check_disjoint(ops)
        request = rpc.TxnRequest(
            compare=[_compare(g) for g in guards],
            success=[_request_op(op) for op in ops],
        )

        async def op(c: _Connection) -> TxnResult:
            reply = await c.kv.Txn(request, timeout=self._timeout)
            return TxnResult(succeeded=reply.succeeded, revision=int(reply.header.revision))

        return await self._call(op)

    # -- leases -----------------------------------------------------------

    async def grant_lease(self, ttl: float) -> int:
        async def op(c: _Connection) -> int:
            # etcd leases count whole seconds.
            reply = await c.lease.LeaseGrant(rpc.LeaseGrantRequest(TTL=max(1, math.ceil(ttl))),
                                             timeout=self._timeout)
            return int(reply.ID)

        return await self._call(op)

    async def keepalive(self, lease: int) -> float:
        async def op(c: _Connection) -> float:
            call = c.lease.LeaseKeepAlive(iter([rpc.LeaseKeepAliveRequest(ID=lease)]),
                                          timeout=self._timeout)
            async for reply in call:
                return float(reply.TTL)
            return 0.0

        return await self._call(op)

    async def revoke_lease(self, lease: int) -> None:
        async def op(c: _Connection) -> None:
            try:
                await c.lease.LeaseRevoke(rpc.LeaseRevokeRequest(ID=lease), timeout=self._timeout)
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    raise

        await self._call(op)

    # -- watch ------------------------------------------------------------

    async def wait_for_change(self, key: str, after_revision: int, timeout: float) -> None:
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[rpc.WatchRequest]:
            create = rpc.WatchCreateRequest(key=key.encode(), start_revision=after_revision + 1)
            yield rpc.WatchRequest(create_request=create)
            await stop.wait()

        async def op(c: _Connection) -> None:
            call = c.watch.Watch(requests())
            try:
                async for reply in call:
                    if reply.events or reply.canceled or reply.compact_revision:
                        return
            finally:
                stop.set()
                call.cancel()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._call(op), timeout)
