"""The etcd store (etcd 3.4+), through aetcd.

aetcd provides the channel, the generated etcd stubs, reads and leases.
Transactions and watches are sent as raw etcd requests, because the store
needs the response header's revision (aetcd's `transaction` drops it) and a
one-shot watch with a start revision and a deadline.

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

import aetcd
import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

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


class EtcdStore:
    """A Store on an etcd cluster reached through `endpoints` ("host:port")."""

    def __init__(self, endpoints: Sequence[str], *, timeout: float = 3.0) -> None:
        if not endpoints:
            raise ValueError("at least one etcd endpoint is needed")
        self._endpoints = list(endpoints)
        self._timeout = timeout
        self._index = 0
        self._client: aetcd.Client | None = None
        self._closing: set[asyncio.Task[None]] = set()

    async def open(self) -> None:
        """Nothing to check up front: an etcd that is down now may be up later."""

    # -- connection -------------------------------------------------------

    async def _connected(self) -> aetcd.Client:
        if self._client is None:
            host, _, port = self._endpoints[self._index].rpartition(":")
            client = aetcd.Client(host=host.strip("[]"), port=int(port), timeout=self._timeout)
            await client.connect()
            self._client = client
        return self._client

    def _rotate(self, failed: aetcd.Client) -> None:
        """Move on to the next endpoint after `failed` could not be reached.

        The old connection is closed only later: other calls may still be
        running on it, and closing it now would cancel them.
        """
        stale: aetcd.Client = failed  # (not narrowed by the identity test below)
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

    async def _call(self, fn: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        client = await self._connected()
        try:
            return await fn(client)
        except (aetcd.exceptions.ConnectionFailedError,
                aetcd.exceptions.ConnectionTimeoutError) as e:
            self._rotate(client)
            raise StoreUnavailable(f"etcd unreachable: {e}") from e
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
        async def op(c: aetcd.Client) -> KeyValue | None:
            reply = await c.kvstub.Range(rpc.RangeRequest(key=key.encode()), timeout=self._timeout)
            return _kv(reply.kvs[0]) if reply.kvs else None

        return await self._call(op)

    async def list_prefix(self, prefix: str) -> list[KeyValue]:
        async def op(c: aetcd.Client) -> list[KeyValue]:
            key = prefix.encode()
            request = rpc.RangeRequest(
                key=key,
                range_end=prefix_range_end(key),
                sort_order=rpc.RangeRequest.ASCEND,
                sort_target=rpc.RangeRequest.KEY,
            )
            reply = await c.kvstub.Range(request, timeout=self._timeout)
            return [_kv(raw) for raw in reply.kvs]

        return await self._call(op)

    async def revision(self) -> int:
        async def op(c: aetcd.Client) -> int:
            # A range over a key nobody writes returns just the header.
            request = rpc.RangeRequest(key=b"\0", count_only=True)
            reply = await c.kvstub.Range(request, timeout=self._timeout)
            return int(reply.header.revision)

        return await self._call(op)

    # -- writes -----------------------------------------------------------

    async def txn(self, guards: Sequence[Guard], ops: Sequence[Op]) -> TxnResult:
        check_disjoint(ops)
        request = rpc.TxnRequest(
            compare=[_compare(g) for g in guards],
            success=[_request_op(op) for op in ops],
        )

        async def op(c: aetcd.Client) -> TxnResult:
            reply = await c.kvstub.Txn(request, timeout=self._timeout)
            return TxnResult(succeeded=reply.succeeded, revision=int(reply.header.revision))

        return await self._call(op)

    # -- leases -----------------------------------------------------------

    async def grant_lease(self, ttl: float) -> int:
        async def op(c: aetcd.Client) -> int:
            # etcd leases count whole seconds.
            lease = await c.lease(max(1, math.ceil(ttl)))
            return int(lease.id)

        return await self._call(op)

    async def keepalive(self, lease: int) -> float:
        async def op(c: aetcd.Client) -> float:
            reply = await c.refresh_lease(lease)
            return float(reply.TTL) if reply is not None else 0.0

        return await self._call(op)

    async def revoke_lease(self, lease: int) -> None:
        async def op(c: aetcd.Client) -> None:
            try:
                await c.revoke_lease(lease)
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    raise
            except aetcd.exceptions.ClientError as e:
                if "lease not found" not in str(e):
                    raise

        await self._call(op)

    # -- watch ------------------------------------------------------------

    async def wait_for_change(self, key: str, after_revision: int, timeout: float) -> None:
        stop = asyncio.Event()

        async def requests() -> AsyncIterator[rpc.WatchRequest]:
            create = rpc.WatchCreateRequest(key=key.encode(), start_revision=after_revision + 1)
            yield rpc.WatchRequest(create_request=create)
            await stop.wait()

        async def op(c: aetcd.Client) -> None:
            stub = rpc.WatchStub(c.channel)
            call = stub.Watch(requests())
            try:
                async for reply in call:
                    if reply.events or reply.canceled or reply.compact_revision:
                        return
            finally:
                stop.set()
                call.cancel()

        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._call(op), timeout)
