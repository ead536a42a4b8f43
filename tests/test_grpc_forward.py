"""Forward-with-retry for gRPC (servefleet/_private/dataplane/grpc_forward.py) against
real grpc.aio servers in this process: what is retried, what is not, and a
cancelled caller cancelling the replica's call."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from servefleet._private.dataplane import balancer
from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.dataplane.forward import NoReplicaTook
from servefleet._private.dataplane.grpc_forward import (
    Answer,
    CallFailed,
    GrpcChannels,
    forward_grpc,
)
from servefleet._private.dataplane.metrics import RETRIES
from servefleet._private.testing import free_port
from servefleet._private.wire import REJECTED_METADATA_KEY

METHOD = "/test.v1.Svc/Call"


class Server:
    """A grpc.aio server whose every unary call runs `behaviour`."""

    def __init__(self, behaviour) -> None:
        self.calls = 0
        self.cancelled = asyncio.Event()
        self.behaviour = behaviour
        self.port = free_port()

        async def handle(request: bytes, context) -> bytes:
            self.calls += 1
            try:
                return await self.behaviour(request, context)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise

        self.server = grpc.aio.server(handlers=[grpc.method_handlers_generic_handler(
            "test.v1.Svc", {"Call": grpc.unary_unary_rpc_method_handler(handle)})])
        self.server.add_insecure_port(f"127.0.0.1:{self.port}")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


async def _ok(request: bytes, context) -> bytes:
    return b"ok:" + request


async def _full(request: bytes, context) -> bytes:
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "full",
                        trailing_metadata=((REJECTED_METADATA_KEY, "overloaded"),))
    raise AssertionError("not reached")


async def _draining(request: bytes, context) -> bytes:
    await context.abort(grpc.StatusCode.UNAVAILABLE, "draining",
                        trailing_metadata=((REJECTED_METADATA_KEY, "draining"),))
    raise AssertionError("not reached")


async def _invalid(request: bytes, context) -> bytes:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad request")
    raise AssertionError("not reached")


async def _slow(request: bytes, context) -> bytes:
    await asyncio.sleep(30)
    return b"late"


def _pool(*replicas: tuple[str, str]) -> ReplicaPool:
    pool = ReplicaPool(key=("app", "dep"))
    pool.update([(rid, "h:1") for rid, _ in replicas], max_ongoing=5, max_queued=-1,
                grpc_addresses=dict(replicas))
    return pool


async def _collect(pool: ReplicaPool, channels: GrpcChannels, request: bytes = b"x",
                   unary: bool = False) -> list:
    got: list[bytes] = []

    async def relay(answer: Answer) -> None:
        async for message in answer.messages():
            got.append(message)

    await forward_grpc(pool, channels, METHOD, request, (), 5.0, relay, unary=unary)
    return got


@pytest.fixture
async def servers():
    started: list[Server] = []

    async def start(behaviour) -> Server:
        server = Server(behaviour)
        await server.server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.server.stop(0)


async def test_refused_and_unreachable_replicas_are_retried_elsewhere(servers) -> None:
    full, ok = await servers(_full), await servers(_ok)
    nobody = f"127.0.0.1:{free_port()}"  # a replica that died: nothing listens
    retried = RETRIES.labels("app", "dep", "overloaded")
    before = retried._value.get()
    channels = GrpcChannels()
    for i in range(20):
        pool = _pool(("full", full.address), ("ok", ok.address), ("gone", nobody))
        assert await _collect(pool, channels, b"%d" % i) == [b"ok:%d" % i]
    assert ok.calls == 20 and full.calls > 0
    assert retried._value.get() - before == full.calls
    await channels.close()


async def test_a_call_to_draining_replicas_waits_for_the_next_replica_set(servers) -> None:
    """A rollout the caller has not heard of yet: its replicas all drain, and
    the call waits for the replica set naming the new ones (forward.py)."""
    old = [await servers(_draining) for _ in range(2)]
    channels = GrpcChannels()
    pool = _pool(("a", old[0].address), ("b", old[1].address))
    call = asyncio.create_task(_collect(pool, channels))
    await asyncio.sleep(0.3)
    assert not call.done() and pool.queued == 1
    assert [s.calls for s in old] == [1, 1]
    new = await servers(_ok)
    pool.update([("c", "h:1")], max_ongoing=5, max_queued=-1, grpc_addresses={"c": new.address})
    assert await asyncio.wait_for(call, 5) == [b"ok:x"]
    await channels.close()


async def test_an_error_status_is_the_replicas_answer_and_not_retried(servers) -> None:
    invalid, ok = await servers(_invalid), await servers(_ok)
    channels = GrpcChannels()
    pool = _pool(("invalid", invalid.address))
    with pytest.raises(CallFailed) as failed:
        await _collect(pool, channels)
    assert failed.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert failed.value.details == "bad request" and invalid.calls == 1
    assert pool.ongoing == 0  # the slot is given back
    # Every replica refusing: NoReplicaTook after MAX_ATTEMPTS.
    full = await servers(_full)
    with pytest.raises(NoReplicaTook):
        await _collect(_pool(("full", full.address)), channels)
    assert full.calls == 3 and ok.calls == 0
    await channels.close()


async def test_a_cancelled_caller_cancels_the_call_at_the_replica(servers) -> None:
    slow = await servers(_slow)
    channels = GrpcChannels()
    pool = _pool(("slow", slow.address))
    caller = asyncio.create_task(_collect(pool, channels))
    await asyncio.sleep(0.5)
    assert slow.calls == 1
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(slow.cancelled.wait(), 5)
    assert pool.ongoing == 0
    await channels.close()


async def test_a_replica_holding_unary_calls_unanswered_is_ejected(servers, monkeypatch) -> None:
    """Passive health for gRPC: a unary call the hung replica holds while the
    other answers gets it ejected, so later calls all go to the other."""
    monkeypatch.setattr(balancer, "STALL_MIN_S", 0.2)
    hung, ok = await servers(_slow), await servers(_ok)
    channels = GrpcChannels()
    pool = _pool(("hung", hung.address), ("ok", ok.address))
    pool.replicas["ok"].in_flight = pool.max_ongoing  # the first call goes to the hung one
    held = asyncio.create_task(_collect(pool, channels, unary=True))
    await asyncio.sleep(0.1)
    pool.replicas["ok"].in_flight = 0
    assert hung.calls == 1 and pool.replicas["hung"].awaiting == 1
    assert await _collect(pool, channels, b"a", unary=True) == [b"ok:a"]
    await asyncio.sleep(0.3)  # past the stall time, while "ok" answered
    for i in range(10):
        assert await _collect(pool, channels, b"%d" % i, unary=True) == [b"ok:%d" % i]
    assert hung.calls == 1 and pool.replicas["hung"].ejections == 1
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held
    assert pool.replicas["hung"].awaiting == 0
    await channels.close()
