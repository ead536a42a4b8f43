"""xDS clients hold a replica's drain while they may route to it: the ADS
stream against a real grpc.aio server and client in this process, the
leader's DrainFence told what each client may be using (the EDS response it
last ACKed and those sent since)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from envoy.service.discovery.v3 import discovery_pb2
from google.rpc import status_pb2
from test_xds_server import Stream, _routes, served_ads

from servefleet._private.wire import ROUTES_KEY, replicas_key
from servefleet.controller.drain_fence import DrainFence
from servefleet.controller.watch import Publisher
from servefleet.controller.xds.ads import AggregatedDiscovery
from servefleet.controller.xds.applied import (
    MAX_IN_FLIGHT,
    UNKNOWN,
    AppliedEndpoints,
    Held,
    held,
    routed_by,
)
from servefleet.controller.xds.build import build
from servefleet.controller.xds.envoy_http import http_cluster
from servefleet.controller.xds.resources import ENDPOINTS
from servefleet.v1 import watch_pb2

KEY = ("clf", "Model")
NAMES = ["clf/Model"]


def _set(**grpc_by_replica: str) -> watch_pb2.ReplicaSet:
    """Replicas by id with their gRPC address ("" for one without a gRPC port)."""
    return watch_pb2.ReplicaSet(application="clf", deployment="Model", endpoints=[
        watch_pb2.ReplicaEndpoint(replica_id=r, http_address="127.0.0.1:1", grpc_address=a)
        for r, a in grpc_by_replica.items()])


class Leader:
    """A publisher and the fence it tells of every replica set it publishes (as
    LeaderTerm._note_replica_set does)."""

    def __init__(self) -> None:
        self.publisher = Publisher()
        self.fence = DrainFence()
        self.publisher.publish(ROUTES_KEY, routes=_routes())

    def publish(self, replicas: watch_pb2.ReplicaSet) -> None:
        self.publisher.publish(replicas_key(*KEY), replicas=replicas)
        snapshot = self.publisher.snapshot(replicas_key(*KEY))
        assert snapshot is not None
        self.fence.published(KEY, snapshot.snapshot_id,
                             (e.replica_id for e in snapshot.replicas.endpoints))


@pytest.fixture
async def served():
    leader = Leader()
    leader.publish(_set(r0="127.0.0.1:5001", r1="127.0.0.1:5002"))

    async def refuse(context) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")

    service = AggregatedDiscovery(lambda: leader.publisher, lambda: True, refuse,
                                  fence=lambda: leader.fence)
    async with served_ads(service) as stub:
        yield leader, stub, service


def _ask(version: str = "") -> discovery_pb2.DiscoveryRequest:
    return discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS, resource_names=NAMES,
                                          version_info=version)


def _ack(response: discovery_pb2.DiscoveryResponse) -> discovery_pb2.DiscoveryRequest:
    return discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS, resource_names=NAMES,
                                          version_info=response.version_info,
                                          response_nonce=response.nonce)


def _nack(response: discovery_pb2.DiscoveryResponse,
          version: str = "") -> discovery_pb2.DiscoveryRequest:
    return discovery_pb2.DiscoveryRequest(
        type_url=ENDPOINTS, resource_names=NAMES, version_info=version,
        response_nonce=response.nonce,
        error_detail=status_pb2.Status(code=3, message="not now"))


async def _until(check, seconds: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def _held_back(drain: asyncio.Future) -> None:
    await asyncio.sleep(0.3)
    assert not drain.done()


async def test_a_drain_waits_until_the_client_acks_endpoints_without_the_replica(served):
    leader, stub, service = served
    fence = leader.fence
    call = Stream(stub)
    await call.write(_ask())
    first = await call.next()
    # Sent, not yet ACKed: the client may be using it already.
    await _until(lambda: fence.holding(KEY, "r1") != [])
    (reporter,) = fence.holding(KEY, "r1")
    assert reporter.startswith("xds#")
    await call.write(_ack(first))
    (client,) = service.clients.values()
    await _until(lambda: client.subscriptions[ENDPOINTS].acked_version == first.version_info)

    # r1 leaves the set; the client is sent the new endpoints.
    leader.publish(_set(r0="127.0.0.1:5001"))
    second = await call.next()
    assert second.version_info != first.version_info
    drain = asyncio.ensure_future(fence.wait(KEY, "r1", 10.0))
    await _held_back(drain)
    # A NACK keeps what it ACKed before in use.
    await call.write(_nack(second, version=first.version_info))
    await _held_back(drain)
    # After a NACK a client asks on with the version it holds: not an error.
    await call.write(discovery_pb2.DiscoveryRequest(
        type_url=ENDPOINTS, resource_names=NAMES, version_info=first.version_info,
        response_nonce=second.nonce))
    await _held_back(drain)
    # The ACK lets the drain go.
    await call.write(_ack(second))
    assert await asyncio.wait_for(drain, 3.0) == []
    assert fence.holding(KEY, "r0") == [reporter]
    call.close()
    # A closed stream holds nothing, and leaves nothing behind.
    await _until(lambda: fence.holding(KEY, "r0") == [])
    assert fence._routes == {} and fence._seen == {} and fence._streams == set()


async def test_responses_the_client_has_not_answered_yet_hold_their_replicas(served):
    """A change lands before the client's ACK of the response before it (a
    new stream, a slow client): it ACKs the older one, and still holds it."""
    leader, stub, _ = served
    fence = leader.fence
    call = Stream(stub)
    await call.write(_ask())
    first = await call.next()
    leader.publish(_set(r0="127.0.0.1:5001"))
    second = await call.next()
    drain = asyncio.ensure_future(fence.wait(KEY, "r1", 10.0))
    await call.write(_ack(first))  # stale by now, and what it routes by
    await _held_back(drain)
    # r2 comes and goes before the client answers either response.
    leader.publish(_set(r0="127.0.0.1:5001", r2="127.0.0.1:5003"))
    third = await call.next()
    leader.publish(_set(r0="127.0.0.1:5001"))
    fourth = await call.next()
    assert len({first.nonce, second.nonce, third.nonce, fourth.nonce}) == 4
    quick = asyncio.ensure_future(fence.wait(KEY, "r2", 10.0))
    await _held_back(quick)
    # Its ACK of the last one says it is past all of them.
    await call.write(_ack(fourth))
    assert await asyncio.wait_for(drain, 3.0) == []
    assert await asyncio.wait_for(quick, 3.0) == []
    call.close()


async def test_a_set_change_the_endpoints_do_not_show_moves_the_client_along(served):
    """r2 has no gRPC port, so its coming and going leaves the EDS resource (and
    its version) as it was, and nothing is sent: the client still holds the
    current set, not the one it ACKed."""
    leader, stub, _ = served
    fence = leader.fence
    call = Stream(stub)
    await call.write(_ask())
    await call.write(_ack(await call.next()))
    leader.publish(_set(r0="127.0.0.1:5001", r1="127.0.0.1:5002", r2=""))
    await _until(lambda: fence.holding(KEY, "r2") != [])
    leader.publish(_set(r0="127.0.0.1:5001", r1="127.0.0.1:5002"))
    assert await fence.wait(KEY, "r2", 3.0) == []
    await call.quiet(0.2)
    call.close()


async def test_a_client_that_resumes_holds_what_it_had(served):
    """A new stream's first request names the version the client holds: the
    current one holds the current set; one this leader cannot tell holds
    every replica until the client ACKs."""
    leader, stub, service = served
    fence = leader.fence
    call = Stream(stub)
    await call.write(_ask())
    current = await call.next()
    call.close()
    await _until(lambda: not fence._streams)
    again = Stream(stub)
    await again.write(_ask(current.version_info))
    await again.next()
    (client,) = service.clients.values()
    snapshot = leader.publisher.snapshot(replicas_key(*KEY))
    assert {h.snapshot_id for h in client.applied.accepted.values()} == {snapshot.snapshot_id}
    again.close()
    await _until(lambda: not fence._streams)
    lost = Stream(stub)
    await lost.write(_ask("a-version-of-another-time"))
    resent = await lost.next()
    (client,) = service.clients.values()
    assert {h.snapshot_id for h in client.applied.accepted.values()} == {UNKNOWN}
    await _until(lambda: fence.holding(KEY, "gone") != [])  # any replica
    await lost.write(_ack(resent))
    await _until(lambda: fence.holding(KEY, "gone") == [])
    assert fence.holding(KEY, "r1") != []
    lost.close()


def test_the_sets_a_client_may_route_by_are_named_together() -> None:
    """An Envoy's HTTP endpoints and a gRPC client's of one deployment, one
    ACKed before the last change: both sets are named."""
    table = _routes()
    table.routes.add(route_prefix="/clf", application="clf", deployment="Model")
    before = build(table, {KEY: _set(r0="127.0.0.1:5001", r1="127.0.0.1:5002")})
    before.snapshot_ids = {KEY: "old"}
    now = build(table, {KEY: _set(r0="127.0.0.1:5001")})
    now.snapshot_ids = {KEY: "new"}
    http = http_cluster(*KEY)
    assert routed_by([held(now, ["clf/Model", http])], now) == {KEY: "new"}
    assert routed_by([held(before, ["clf/Model", http])], now) == {KEY: "old"}
    assert routed_by([held(before, ["clf/Model"]), held(now, [http])], now) == \
        {KEY: ("new", "old")}
    # A resource that is gone keeps naming what it was built from.
    assert routed_by([held(now, ["clf/Model"])], build(None, {})) == {KEY: "new"}


def test_the_fence_hears_the_whole_set_first_then_what_changed() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[dict, bool]] = []

        def reported(self, reporter_id, applied, replace=False, stream=False) -> None:
            self.calls.append((dict(applied), replace))

    other = ("clf", "Canary")
    resources = build(None, {})
    fence = Recorder()
    applied = AppliedEndpoints(fence, "xds#1")  # type: ignore[arg-type]
    applied.report(resources)
    applied.sent("1", "v1", {"a": Held(KEY, "v1", "s1"), "b": Held(other, "v1", "t1")})
    applied.report(resources)
    applied.report(resources)  # nothing changed: nothing said
    applied.sent("2", "v2", {"a": Held(KEY, "v2", "s2")})
    applied.answered("2", "v2", accepted=True)
    applied.report(resources)
    assert fence.calls == [({}, True), ({KEY: "s1", other: "t1"}, False),
                           ({KEY: "s2", other: ""}, False)]
    # An ACK of a version the response did not carry changes nothing.
    applied.sent("3", "v3", {"a": Held(KEY, "v3", "s3")})
    applied.answered("3", "v2", accepted=True)
    assert [s.nonce for s in applied.in_flight] == ["3"]


def test_a_client_far_behind_holds_every_replica_of_what_it_was_sent() -> None:
    applied = AppliedEndpoints(None, "xds#1")
    for n in range(MAX_IN_FLIGHT + 1):
        applied.sent(str(n), f"v{n}", {"a": Held(KEY, f"v{n}", f"s{n}")})
    assert len(applied.in_flight) == MAX_IN_FLIGHT
    assert applied.accepted == {"a": Held(KEY, "", UNKNOWN)}
    assert routed_by([applied.accepted], build(None, {})) == {KEY: UNKNOWN}


async def test_after_a_nack_a_request_with_the_version_held_is_no_error(served) -> None:
    """grpc-go and Envoy send the version they hold and the latest nonce after
    a NACK; the ACK it holds may have come after the NACKed response was sent."""
    leader, stub, _ = served
    call = Stream(stub)
    await call.write(_ask())
    first = await call.next()
    leader.publish(_set(r0="127.0.0.1:5001"))
    second = await call.next()
    await call.write(_ack(first))  # stale: the second was sent before it
    await call.write(_nack(second, version=first.version_info))
    await call.write(discovery_pb2.DiscoveryRequest(
        type_url=ENDPOINTS, resource_names=NAMES, version_info=first.version_info,
        response_nonce=second.nonce))
    await call.quiet(0.3)
    leader.publish(_set(r0="127.0.0.1:5001", r1="127.0.0.1:5002"))
    assert (await call.next()).version_info == first.version_info  # the stream lives on
    call.close()


def test_nacked_responses_stay_in_use_until_an_ack_puts_them_behind() -> None:
    """gRPC applies the valid part of a response it NACKs: a NACK of a later
    response does not put an earlier NACKed one behind the client."""
    applied = AppliedEndpoints(None, "xds#1")
    applied.sent("1", "v1", {"a": Held(KEY, "v1", "s1")})
    applied.answered("1", "v1", accepted=True)
    applied.sent("2", "v2", {"a": Held(KEY, "v2", "s2")})
    applied.answered("2", "", accepted=False)
    applied.sent("3", "v3", {"a": Held(KEY, "v3", "s3")})
    applied.answered("3", "v1", accepted=False)
    assert routed_by([applied.accepted, *(s.held for s in applied.in_flight)],
                     build(None, {})) == {KEY: ("s1", "s2", "s3")}
    applied.sent("4", "v4", {"a": Held(KEY, "v4", "s4")})
    applied.answered("4", "v4", accepted=True)
    assert applied.in_flight == [] and applied.accepted == {"a": Held(KEY, "v4", "s4")}


async def test_after_a_nack_an_ack_of_a_later_response_still_carries_its_version(served):
    leader, stub, service = served
    call = Stream(stub)
    await call.write(_ask())
    first = await call.next()
    await call.write(_nack(first))
    (client,) = service.clients.values()
    await _until(lambda: client.subscriptions[ENDPOINTS].nack != "")
    leader.publish(_set(r0="127.0.0.1:5001"))
    second = await call.next()
    await call.write(discovery_pb2.DiscoveryRequest(
        type_url=ENDPOINTS, resource_names=NAMES, version_info="not-what-it-was-sent",
        response_nonce=second.nonce))
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await asyncio.wait_for(call._reader, 3.0)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "version_info" in (refused.value.details() or "")
