"""Forward-with-retry for calls whose requests stream
(servefleet/_private/dataplane/grpc_requests.py), against real grpc.aio servers
in this process: a front server relays to replica servers as the proxy does."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import grpc

from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.dataplane.grpc_forward import CallFailed, GrpcChannels
from servefleet._private.dataplane.grpc_requests import forward_grpc_requests
from servefleet._private.wire import ADMITTED_METADATA_KEY, REJECTED_METADATA_KEY

METHOD = "/t.S/M"


async def _echo_then_abort(requests, context):
    """A replica: takes the call, echoes 5 messages, then ends it with ABORTED
    while the client is still sending."""
    await context.send_initial_metadata(((ADMITTED_METADATA_KEY, "1"),))
    seen = 0
    async for message in requests:
        seen += 1
        if seen > 5:
            await context.abort(grpc.StatusCode.ABORTED, "stopped")
        yield message


async def _refuse(requests, context):
    """A full replica: refuses before reading anything."""
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "full",
                        trailing_metadata=((REJECTED_METADATA_KEY, "overloaded"),))
    yield b""  # not reached


async def _count(requests, context):
    await context.send_initial_metadata(((ADMITTED_METADATA_KEY, "1"),))
    total = 0
    async for _ in requests:
        total += 1
    yield b"%d" % total


async def _server(handler) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "t.S", {"M": grpc.stream_stream_rpc_method_handler(handler)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _front(replicas: dict[str, str]) -> tuple[grpc.aio.Server, str]:
    """A server relaying every call to the replicas, as the proxy does."""
    pool = ReplicaPool(key=("app", "dep"))
    pool.update([(rid, "h:1") for rid in replicas], max_ongoing=5, max_queued=-1,
                grpc_addresses=replicas)
    channels = GrpcChannels()

    async def relay_to_replicas(requests, context):
        async def relay(answer) -> None:
            async for message in answer.messages():
                await context.write(message)

        try:
            await forward_grpc_requests(pool, channels, METHOD, requests, (), 10, relay)
        except CallFailed as e:
            await context.abort(e.code, e.details)

    return await _server(relay_to_replicas)


def _call(address: str, messages: int) -> tuple[str, int, bytes]:
    """A sync client sending `messages` messages: (status, answers, the last)."""
    with grpc.insecure_channel(address) as channel:
        answers, last = 0, b""
        try:
            call: Any = channel.stream_stream(METHOD)
            for message in call(iter([b"x" * 16] * messages)):
                answers, last = answers + 1, message
        except grpc.RpcError as e:
            return e.code().name, answers, last
        return "OK", answers, last


async def test_the_replicas_status_reaches_the_client_when_it_ends_the_call_mid_stream() -> None:
    """grpc.aio's write() racing the replica's status made the call INTERNAL
    ("Internal error from Core") 5 times in 30: the status is the replica's."""
    replica, address = await _server(_echo_then_abort)
    front, front_address = await _front({"r1": address})
    try:
        outcomes = collections.Counter(
            [await asyncio.to_thread(_call, front_address, 100_000) for _ in range(30)])
    finally:
        await front.stop(None)
        await replica.stop(None)
    assert outcomes == {("ABORTED", 5, b"x" * 16): 30}


async def test_a_refused_call_goes_whole_to_another_replica() -> None:
    full, full_address = await _server(_refuse)
    counting, counting_address = await _server(_count)
    front, front_address = await _front({"full": full_address, "ok": counting_address})
    try:
        # Whichever replica the pool picks first, all 200 messages are counted.
        outcomes = [await asyncio.to_thread(_call, front_address, 200) for _ in range(10)]
    finally:
        await front.stop(None)
        await full.stop(None)
        await counting.stop(None)
    assert outcomes == [("OK", 1, b"200")] * 10
