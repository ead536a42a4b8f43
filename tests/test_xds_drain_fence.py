"""xDS clients hold a replica's drain until they ACK endpoints without it:
the ADS stream against a real grpc.aio server and client in this process,
the leader's DrainFence told what each client acknowledged."""

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
from servefleet.controller.xds.applied import AppliedEndpoints, Held, routed_by
from servefleet.controller.xds.build import build
from servefleet.controller.xds.resources import ENDPOINTS
from servefleet.v1 import watch_pb2

KEY = ("clf", "Model")


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
        yield leader, stub


def _ack(response: discovery_pb2.DiscoveryResponse) -> discovery_pb2.DiscoveryRequest:
    return discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS, resource_names=["clf/Model"],
                                          version_info=response.version_info,
                                          response_nonce=response.nonce)


async def _until(check, seconds: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_drain_waits_for_the_xds_clients_ack(served) -> None:
    leader, stub = served
    fence = leader.fence
    call = Stream(stub)
    await call.write(discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS,
                                                    resource_names=["clf/Model"]))
    first = await call.next()
    # Sent but not acknowledged: the client routes by nothing yet.
    await asyncio.sleep(0.2)
    assert fence.holding(KEY, "r1") == []
    await call.write(_ack(first))
    await _until(lambda: fence.holding(KEY, "r1") != [])
    (reporter,) = fence.holding(KEY, "r1")
    assert reporter.startswith("xds#")

    # r1 leaves the set; the client is sent the new endpoints but has not ACKed.
    leader.publish(_set(r0="127.0.0.1:5001"))
    second = await call.next()
    assert second.version_info != first.version_info
    drain = asyncio.ensure_future(fence.wait(KEY, "r1", 10.0))
    await asyncio.sleep(0.3)
    assert not drain.done() and fence.holding(KEY, "r1") == [reporter]
    # A NACK keeps the old endpoints in use.
    await call.write(discovery_pb2.DiscoveryRequest(
        type_url=ENDPOINTS, resource_names=["clf/Model"], response_nonce=second.nonce,
        error_detail=status_pb2.Status(code=3, message="not now")))
    await asyncio.sleep(0.3)
    assert not drain.done()
    # The ACK lets the drain go.
    await call.write(_ack(second))
    assert await asyncio.wait_for(drain, 3.0) == []
    assert fence.holding(KEY, "r0") == [reporter]
    call.close()
    # A closed stream holds nothing.
    await _until(lambda: fence.holding(KEY, "r0") == [])


async def test_a_set_change_the_endpoints_do_not_show_moves_the_client_along(served) -> None:
    """r2 has no gRPC port, so its coming and going leaves the EDS resource (and
    its version) as it was, and nothing is sent: the client still holds the
    current set, not the one it ACKed."""
    leader, stub = served
    fence = leader.fence
    call = Stream(stub)
    await call.write(discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS,
                                                    resource_names=["clf/Model"]))
    await call.write(_ack(await call.next()))
    leader.publish(_set(r0="127.0.0.1:5001", r1="127.0.0.1:5002", r2=""))
    await _until(lambda: fence.holding(KEY, "r2") != [])
    leader.publish(_set(r0="127.0.0.1:5001", r1="127.0.0.1:5002"))
    assert await fence.wait(KEY, "r2", 3.0) == []
    await call.quiet(0.2)
    call.close()


def test_two_resources_of_one_deployment_that_disagree_hold_the_older_set() -> None:
    """An Envoy's HTTP endpoints and a gRPC client's of one deployment, one of
    them ACKed before the last change: the older set is named."""
    before = build(_routes(), {KEY: _set(r0="127.0.0.1:5001", r1="127.0.0.1:5002")})
    before.snapshot_ids = {KEY: "old"}
    now = build(_routes(), {KEY: _set(r0="127.0.0.1:5001")})
    now.snapshot_ids = {KEY: "new"}
    current = Held(KEY, now.endpoints_version("clf/Model") or "", "new")
    stale = Held(KEY, before.endpoints_version("clf/Model") or "", "old")
    assert routed_by({"clf/Model": current}, now) == {KEY: "new"}
    assert routed_by({"clf/Model": stale}, now) == {KEY: "old"}
    assert routed_by({"a": current, "b": stale}, now) == {KEY: "old"}
    assert routed_by({"a": stale, "b": current}, now) == {KEY: "old"}
    # A resource that is gone keeps naming what it was built from.
    assert routed_by({"clf/Model": current}, build(None, {})) == {KEY: "new"}


def test_the_fence_hears_the_whole_set_first_then_what_changed() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[dict, bool]] = []

        def reported(self, reporter_id, applied, replace=False) -> None:
            self.calls.append((dict(applied), replace))

    other = ("clf", "Canary")
    resources = build(None, {})
    resources.snapshot_ids = {}
    fence = Recorder()
    applied = AppliedEndpoints(fence, "xds#1")  # type: ignore[arg-type]
    applied.report(resources)
    applied.acked = {"a": Held(KEY, "v1", "s1"), "b": Held(other, "v1", "t1")}
    applied.report(resources)
    applied.report(resources)  # nothing changed: nothing said
    applied.acked = {"a": Held(KEY, "v2", "s2")}
    applied.report(resources)
    assert fence.calls == [({}, True), ({KEY: "s1", other: "t1"}, False),
                           ({KEY: "s2", other: ""}, False)]
