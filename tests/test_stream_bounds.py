"""The bounds on the xDS server's streams, against real grpc.aio servers and
clients in this process: a client that does not read is cut off with
RESOURCE_EXHAUSTED and its stream's state freed, through a standby too;
garbage ADS requests get INVALID_ARGUMENT naming the field, with no
traceback logged; client text is logged on one line. (The Watch and
load-report streams: tests/test_stream_bounds_watch.py; a controller
process's memory: tests/test_stream_bounds_process.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2

from servefleet._private.grpc_guard import Guard
from servefleet._private.testing import free_port
from servefleet._private.wire import ROUTES_KEY
from servefleet.controller.api.gate import SERVICE_NAME
from servefleet.controller.watch import Publisher
from servefleet.controller.xds.ads import AggregatedDiscovery
from servefleet.controller.xds.resources import CLUSTER, ENDPOINTS, LISTENER
from servefleet.v1 import watch_pb2

FORGED = "\n2026-01-01 00:00:00 ERROR forged"
# A client window that BDP probing does not grow: a client that does not
# read fills it with a few responses.
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0)]
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"


def routed(count: int) -> Publisher:
    """A publisher whose CDS wildcard response is ~125 bytes per route."""
    publisher = Publisher()
    publisher.publish(ROUTES_KEY, routes=watch_pb2.RouteTable(routes=[
        watch_pb2.Route(route_prefix=f"/r{i}", application="app", deployment=f"D{i}")
        for i in range(count)]))
    return publisher


@contextlib.asynccontextmanager
async def serving(*services: Any) -> AsyncIterator[str]:
    """A grpc.aio server on a free port with `services` (add_X_to_server, servicer)."""
    server = grpc.aio.server(interceptors=[Guard(SERVICE_NAME)])
    for add, servicer in services:
        add(servicer, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


async def refuse_not_leading(context: Any) -> None:
    await context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")


def leader_ads(publisher: Publisher) -> AggregatedDiscovery:
    return AggregatedDiscovery(lambda: publisher, lambda: True, refuse_not_leading)


def standby_ads(leader: str) -> AggregatedDiscovery:
    async def where() -> str:
        return leader

    return AggregatedDiscovery(lambda: None, lambda: False, refuse_not_leading, leader=where,
                               connect=grpc.aio.insecure_channel)


def ads(service: AggregatedDiscovery) -> tuple[Any, AggregatedDiscovery]:
    return ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server, service


async def ended(call: Any, timeout: float = 10.0) -> grpc.aio.AioRpcError:
    """Read `call` to its end; the error it ended with."""
    async def drain() -> None:
        while await call.read() is not grpc.aio.EOF:
            pass

    with pytest.raises(grpc.aio.AioRpcError) as error:
        await asyncio.wait_for(drain(), timeout)
    return error.value


def one_of_each(i: int, node: str = "") -> discovery_pb2.DiscoveryRequest:
    """A CDS wildcard request (the whole set in answer), then one naming 10,000
    clusters, in turn: every request changes the subscription and is answered.
    The first names the client's node."""
    names = [] if i % 2 else [f"app{i}/{j:05d}" for j in range(10_000)]
    request = discovery_pb2.DiscoveryRequest(type_url=CLUSTER, resource_names=names)
    if i == 0:
        request.node.id = node
    return request


def small(i: int, node: str = "") -> discovery_pb2.DiscoveryRequest:
    """A CDS wildcard request without a nonce: each is answered with the whole set."""
    return _request(type_url=CLUSTER, node_id=node)


async def send_until(call: Any, done: Any, node: str, requests: int = 300,
                     request: Any = one_of_each) -> int:
    """Write `request(i, node)` for each i, never reading an answer, until `done()`;
    how many were written. A write may wait for the server to read: `done()` is
    asked meanwhile, and that write is left pending."""
    for i in range(requests):
        writing = asyncio.ensure_future(call.write(request(i, node)))
        writing.add_done_callback(lambda w: w.cancelled() or w.exception())
        while not writing.done():
            if done():
                return i
            await asyncio.wait({writing}, timeout=0.05)
        if writing.exception() is not None and not done():
            raise writing.exception()  # type: ignore[misc]
        if done():
            return i + 1
    return requests


def assert_cut_off(error: grpc.aio.AioRpcError) -> None:
    """The status of a stream cut off for not reading, as the client sees it after
    reading what it was sent. grpc.aio's client reports INTERNAL instead when a
    write of its own is still pending as the call ends (send_until leaves one: its
    last write waits for a server that stopped reading); the status the server
    sends is checked without one (test_the_client_is_told_why_once_it_reads)."""
    if error.code() == grpc.StatusCode.INTERNAL:
        assert "SendMessageOperation" in (error.debug_error_string() or ""), error
        return
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert (error.details() or "").startswith("the client does not read its stream: it "
                                              "sent 32 requests or 30000 names"), error


CUT_OFF = "cut off xDS client 'silent'"


def holds(service: AggregatedDiscovery, node: str) -> bool:
    """Whether `service` holds a stream of `node` (its subscriptions)."""
    return any(c.node_id == node for c in service.clients.values())


async def eventually(condition: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


# -- xDS ----------------------------------------------------------------------------


async def test_an_xds_client_that_does_not_read_is_cut_off(caplog) -> None:
    caplog.set_level(logging.INFO)
    service = leader_ads(routed(500))
    async with serving(ads(service)) as address, \
            grpc.aio.insecure_channel(address, options=SMALL_WINDOW) as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)

        async def read_each_answer() -> None:
            """A client that sends the same, but reads: it is never cut off."""
            call = stub.StreamAggregatedResources()
            for i in range(100):
                await call.write(one_of_each(i, "reading"))
                assert (await asyncio.wait_for(call.read(), 10)).type_url == CLUSTER
            call.cancel()

        reading = asyncio.create_task(read_each_answer())
        call = stub.StreamAggregatedResources()
        # Answers wait for the client to read, its requests pile up: the
        # stream is cut off, and all it held (its subscriptions) goes.
        written = await send_until(call, lambda: CUT_OFF in caplog.text, "silent")
        assert written < 300, "never cut off"
        await eventually(lambda: not holds(service, "silent"))
        # What was sent before it can still be read, then the status.
        assert_cut_off(await ended(call))
        await asyncio.wait_for(reading, 30)


async def test_the_client_is_told_why_once_it_reads(caplog) -> None:
    caplog.set_level(logging.INFO)
    service = leader_ads(routed(500))  # the whole set: ~60 KB, about the client's window
    async with serving(ads(service)) as address, \
            grpc.aio.insecure_channel(address, options=SMALL_WINDOW) as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        # Small requests fit in the server's window: no write is left pending.
        await send_until(call, lambda: CUT_OFF in caplog.text, "silent", request=small)
        await eventually(lambda: not holds(service, "silent"))
        error = await ended(call)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert_cut_off(error)


async def test_through_a_standby_a_client_that_does_not_read_is_cut_off(caplog) -> None:
    caplog.set_level(logging.INFO)
    leader = leader_ads(routed(500))
    async with serving(ads(leader)) as leader_address, \
            serving(ads(standby_ads(leader_address))) as address, \
            grpc.aio.insecure_channel(address, options=SMALL_WINDOW) as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        # The standby stops reading the leader's answers, the leader cuts it
        # off, and the standby passes that on.
        assert await send_until(call, lambda: CUT_OFF in caplog.text, "silent",
                                request=small) < 300, "never cut off"
        error = await ended(call)
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
        assert_cut_off(error)


async def test_a_nack_is_logged_on_one_line(caplog) -> None:
    caplog.set_level(logging.INFO)
    service = leader_ads(routed(1))
    async with serving(ads(service)) as address, grpc.aio.insecure_channel(address) as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        first = discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS, resource_names=["x"])
        first.node.id = "node" + FORGED
        await call.write(first)
        response = await asyncio.wait_for(call.read(), 10)
        await call.write(discovery_pb2.DiscoveryRequest(
            type_url=ENDPOINTS, resource_names=["x"], response_nonce=response.nonce,
            error_detail=status_pb2.Status(code=3, message="bad endpoint" + FORGED)))
        await eventually(lambda: any(c.subscriptions[ENDPOINTS].nack
                                     for c in service.clients.values()))
        call.cancel()
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("xds.ads")]
    nack = next(line for line in lines if "refused" in line)
    assert "\n" not in nack and "'bad endpoint\\n2026-01-01 00:00:00 ERROR forged'" in nack
    assert "'node\\n2026-01-01 00:00:00 ERROR forged'" in nack
    assert not any("\n" in line for line in lines), lines


def _request(**fields: Any) -> discovery_pb2.DiscoveryRequest:
    node_id = fields.pop("node_id", "")
    request = discovery_pb2.DiscoveryRequest(**{"type_url": LISTENER, **fields})
    request.node.id = node_id
    return request


GARBAGE = {
    "not a DiscoveryRequest": (b"\xff\xff\xff\xff garbage", "request: not a valid "
                                                           "DiscoveryRequest"),
    "an unknown type": (_request(type_url="type.googleapis.com/envoy.extensions."
                                          "transport_sockets.tls.v3.Secret"), "type_url: "),
    "no type": (_request(type_url=""), "type_url: "),
    "too many names": (_request(resource_names=[f"n{i}" for i in range(10_001)]),
                       "resource_names: at most 10000 names, got 10001"),
    "a name too long": (_request(resource_names=["ok", "n" * 300]),
                        "resource_names[1]: at most 256 characters, got 300"),
    "a version too long": (_request(version_info="v" * 300), "version_info: at most 256"),
    "a nonce too long": (_request(response_nonce="1" * 100), "response_nonce: at most 64"),
    "a node id too long": (_request(node_id="n" * 2000), "node.id: at most 1024"),
}


@pytest.mark.parametrize("case", sorted(GARBAGE))
async def test_garbage_gets_invalid_argument_naming_the_field(caplog, case: str) -> None:
    caplog.set_level(logging.INFO)
    sent, named = GARBAGE[case]
    service = leader_ads(routed(1))
    async with serving(ads(service)) as address, grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(ADS)() if isinstance(sent, bytes) else \
            ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        await call.write(sent)
        error = await ended(call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert (error.details() or "").startswith(named), error.details()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_an_ack_of_another_version_gets_invalid_argument(caplog) -> None:
    caplog.set_level(logging.INFO)
    service = leader_ads(routed(1))
    async with serving(ads(service)) as address, grpc.aio.insecure_channel(address) as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        await call.write(_request(type_url=CLUSTER))
        response = await asyncio.wait_for(call.read(), 10)
        await call.write(_request(type_url=CLUSTER, version_info="not-" + response.version_info,
                                  response_nonce=response.nonce))
        error = await ended(call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error.details() or "").startswith("version_info: an ACK carries the version")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("sent", [b"\xff\xff garbage", _request(type_url="nonsense")])
async def test_through_a_standby_garbage_gets_invalid_argument(caplog, sent: Any) -> None:
    caplog.set_level(logging.INFO)
    async with serving(ads(leader_ads(routed(1)))) as leader_address, \
            serving(ads(standby_ads(leader_address))) as address, \
            grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(ADS)() if isinstance(sent, bytes) else \
            ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        await call.write(sent)
        error = await ended(call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
