"""Watch: snapshots over a server stream, resumption by snapshot id, failover."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from servefleet._private.watch_client import WatchClient
from servefleet._private.wire import check_watch_key
from servefleet.client import ControllerClient
from servefleet.controller.watch import Heartbeat, Publisher
from servefleet.v1 import controller_pb2_grpc, watch_pb2
from servefleet.v1 import deployment_pb2 as d


def spec(name: str, route: str | None = None, replicas: int = 1) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="m:C", route_prefix=route or None,
                            replica_config=d.ReplicaConfig(num_replicas=replicas))


def routes_of(snapshot: watch_pb2.Snapshot) -> list[tuple[str, str]]:
    return [(r.route_prefix, r.deployment) for r in snapshot.routes.routes]


# -- Publisher, pure -------------------------------------------------------------


def test_publisher_sends_only_what_the_client_lacks() -> None:
    publisher = Publisher()
    publisher.publish("routes", routes=watch_pb2.RouteTable())
    publisher.publish("replicas/a/x", replicas=watch_pb2.ReplicaSet(deployment="x"))
    publisher.publish("replicas/a/y", replicas=watch_pb2.ReplicaSet(deployment="y"))
    known = {"routes": "", "replicas/": ""}
    first = [r.snapshot for r in publisher.diff(sorted(known), known)]
    assert sorted(s.key for s in first) == ["replicas/a/x", "replicas/a/y", "routes"]
    assert publisher.diff(sorted(known), known) == []
    generation = publisher.generation
    publisher.publish("replicas/a/x", replicas=watch_pb2.ReplicaSet(deployment="x"))
    assert publisher.generation == generation, "an equal value is not a change"
    publisher.publish("replicas/a/x", replicas=watch_pb2.ReplicaSet(deployment="x",
                                                                    max_ongoing_requests=3))
    publisher.remove("replicas/a/y")
    changes = [r.snapshot for r in publisher.diff(sorted(known), known)]
    assert [(s.key, s.deleted) for s in changes] == [("replicas/a/x", False),
                                                     ("replicas/a/y", True)]


def _diff_keys(publisher: Publisher, known: dict[str, str],
               since: int | None) -> list[tuple[str, bool]]:
    return [(r.snapshot.key, r.snapshot.deleted)
            for r in publisher.diff(sorted(known), known, since)]


@pytest.mark.parametrize("log_length", [4096, 2])
def test_a_diff_since_a_generation_equals_a_full_diff(monkeypatch, log_length: int) -> None:
    """diff(since=g) looks only at the keys changed after g, and answers what a
    full diff would; with the change log too short to reach back (2 entries
    here), it falls back to the full diff."""
    monkeypatch.setattr("servefleet.controller.watch.CHANGE_LOG_LENGTH", log_length)
    publisher = Publisher()
    for name in "xyz":
        publisher.publish(f"replicas/a/{name}", replicas=watch_pb2.ReplicaSet(deployment=name))
    publisher.publish("replicas/b/w", replicas=watch_pb2.ReplicaSet(deployment="w"))
    publisher.publish("routes", routes=watch_pb2.RouteTable())
    incremental = {"routes": "", "replicas/a/": ""}
    full = dict(incremental)
    assert _diff_keys(publisher, incremental, None) == _diff_keys(publisher, full, None)
    seen = publisher.generation
    assert _diff_keys(publisher, incremental, seen) == []
    publisher.publish("replicas/a/x", replicas=watch_pb2.ReplicaSet(deployment="x",
                                                                    max_ongoing_requests=2))
    publisher.publish("replicas/b/w", replicas=watch_pb2.ReplicaSet(deployment="w",
                                                                    max_ongoing_requests=2))
    publisher.remove("replicas/a/y")
    publisher.publish("replicas/a/v", replicas=watch_pb2.ReplicaSet(deployment="v"))
    changes = _diff_keys(publisher, incremental, seen)
    assert sorted(changes) == sorted(_diff_keys(publisher, full, None)) == [
        ("replicas/a/v", False), ("replicas/a/x", False), ("replicas/a/y", True)]
    assert incremental == full


def test_changed_since_reaches_back_as_far_as_its_log(monkeypatch) -> None:
    monkeypatch.setattr("servefleet.controller.watch.CHANGE_LOG_LENGTH", 3)
    publisher = Publisher()
    start = publisher.generation
    for n in range(3):
        publisher.publish("routes", routes=watch_pb2.RouteTable(request_timeout_s=n + 1))
    assert publisher.changed_since(start) == ["routes"]
    assert publisher.changed_since(publisher.generation) == []
    publisher.publish("replicas/a/x", replicas=watch_pb2.ReplicaSet(deployment="x"))
    assert publisher.changed_since(start) is None, "the first change fell out of the log"
    assert publisher.changed_since(start + 1) == ["routes", "replicas/a/x"]


async def test_a_heartbeat_is_due_an_interval_after_the_last_message() -> None:
    """The timer outlives the waits: a message sent moves the beat later
    without a new timer; with nothing sent, the wait ends False on time."""
    publisher = Publisher()
    beat = Heartbeat(0.2)
    beat.sent()
    started = time.monotonic()
    await asyncio.sleep(0.1)
    beat.sent()  # a change went out: the beat is now due 0.2 s from here
    assert await publisher.next_change(publisher.generation, beat) is False
    assert 0.28 <= time.monotonic() - started < 1.0
    changing = asyncio.create_task(publisher.next_change(publisher.generation, beat))
    await asyncio.sleep(0.05)
    publisher.publish("routes", routes=watch_pb2.RouteTable())
    assert await changing is True
    beat.stop()


def test_snapshot_ids_are_content_digests() -> None:
    one, two = Publisher(), Publisher()
    for p in (one, two):
        p.publish("routes", routes=watch_pb2.RouteTable(routes=[watch_pb2.Route(
            route_prefix="/a", application="app", deployment="A")]))
    known_one: dict[str, str] = {"routes": ""}
    (snapshot,) = [r.snapshot for r in one.diff(["routes"], known_one)]
    # A client holding one leader's id is sent nothing by another leader with the same state.
    assert two.diff(["routes"], {"routes": snapshot.snapshot_id}) == []


@pytest.mark.parametrize("key", ["routes", "replicas/", "config/", "replicas/app/",
                                 "replicas/app/Model", "config/app/Model"])
def test_good_watch_keys(key: str) -> None:
    assert check_watch_key(key) is None


@pytest.mark.parametrize("key", ["", "route", "replicas", "replicas/app", "x/a/b",
                                 "replicas/a/b/c"])
def test_bad_watch_keys(key: str) -> None:
    assert check_watch_key(key) is not None


# -- over gRPC ---------------------------------------------------------------------


async def next_snapshot(call) -> watch_pb2.Snapshot:
    async for response in call:
        if response.HasField("snapshot"):
            return response.snapshot
    raise AssertionError("stream ended")


async def test_watch_stream_over_grpc(fleet) -> None:
    (proc,) = fleet.start(1)
    fleet.leader()
    with ControllerClient(proc.address) as client:
        client.deploy(spec("A", "/a"))
    async with grpc.aio.insecure_channel(proc.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        call = stub.Watch(watch_pb2.WatchRequest(known={"routes": ""}, heartbeat_s=0.2))
        first = await asyncio.wait_for(next_snapshot(call), 10)
        assert routes_of(first) == [("/a", "A")]
        call.cancel()

        # Resuming with the id held: only heartbeats until something changes.
        call = stub.Watch(watch_pb2.WatchRequest(known={"routes": first.snapshot_id},
                                                 heartbeat_s=0.2))
        responses = call.__aiter__()
        beat = await asyncio.wait_for(responses.__anext__(), 5)
        assert beat.HasField("heartbeat")
        await asyncio.to_thread(lambda: ControllerClient(proc.address).deploy(spec("B", "/b")))
        while True:
            response = await asyncio.wait_for(responses.__anext__(), 5)
            if response.HasField("snapshot"):
                break
        assert routes_of(response.snapshot) == [("/a", "A"), ("/b", "B")]
        call.cancel()

        with pytest.raises(grpc.aio.AioRpcError) as err:
            await next_snapshot(stub.Watch(watch_pb2.WatchRequest(known={"nonsense": ""})))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "known['nonsense']" in (err.value.details() or "")


async def test_a_burst_of_thousands_of_watch_streams_all_open(sqlite_fleet) -> None:
    """3,500 Watch calls sent at once, as after a failover of a large cluster:
    gRPC's server holds calls it has not yet handed to the application in a
    queue that cancelled those past 3,000 by default (they never opened, and
    bench/watch_fanout.py could not measure 5,000 streams)."""
    (proc,) = sqlite_fleet.start(1)
    sqlite_fleet.leader()
    streams, per_channel = 3500, 100
    channels = [grpc.aio.insecure_channel(proc.address,
                                          options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(streams // per_channel)]
    try:
        await asyncio.gather(*(channel.channel_ready() for channel in channels))
        calls = [controller_pb2_grpc.ControllerServiceStub(channels[i % len(channels)]).Watch(
            watch_pb2.WatchRequest(known={"routes": ""}, heartbeat_s=30))
            for i in range(streams)]
        firsts = await asyncio.wait_for(
            asyncio.gather(*(call.read() for call in calls), return_exceptions=True), 120)
        failed = [f for f in firsts if not isinstance(f, watch_pb2.WatchResponse)]
        assert not failed, f"{len(failed)} of {streams} streams failed, e.g. {failed[0]!r}"
        for call in calls:
            call.cancel()
    finally:
        await asyncio.gather(*(channel.close() for channel in channels))


async def test_proxies_announce_themselves_in_status(fleet) -> None:
    (proc,) = fleet.start(1)
    fleet.leader()
    watcher = WatchClient([proc.address], ["routes"], kind=watch_pb2.WATCHER_KIND_PROXY,
                          address="127.0.0.1:8000", watcher_id="proxy-1")
    watcher.start()
    try:
        await asyncio.wait_for(watcher.connected.wait(), 10)
        status = await asyncio.to_thread(lambda: ControllerClient(proc.address).status())
        assert [(p.id, p.address, p.healthy) for p in status.proxies] == [
            ("proxy-1", "127.0.0.1:8000", True)]
    finally:
        await watcher.close()


async def test_watch_client_follows_failover_and_resumes(etcd_fleet) -> None:
    etcd_fleet.start(2, lease_ttl=2)
    leader = etcd_fleet.leader()
    standby = next(p for p in etcd_fleet.started if p is not leader)
    await asyncio.to_thread(lambda: ControllerClient(leader.address).deploy(spec("A", "/a")))
    received: list[watch_pb2.Snapshot] = []
    # Pointed at the standby first: it must follow the hint to the leader.
    watcher = WatchClient([standby.address, leader.address], ["routes", "replicas/"],
                          on_snapshot=received.append, heartbeat_s=0.5)
    watcher.start()
    try:
        deadline = time.monotonic() + 10
        while "routes" not in watcher.snapshots and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert routes_of(watcher.snapshots["routes"]) == [("/a", "A")]
        assert "replicas/default/A" in watcher.snapshots
        before = len(received)
        reconnects = watcher.reconnects

        await asyncio.to_thread(leader.kill)
        await asyncio.to_thread(etcd_fleet.leader, 15)
        deadline = time.monotonic() + 15
        while (watcher.reconnects == reconnects or not watcher.connected.is_set()) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert watcher.connected.is_set()
        await asyncio.sleep(1.0)
        # The new leader computed the same ids: nothing was sent again.
        assert len(received) == before, [s.key for s in received[before:]]

        await asyncio.to_thread(
            lambda: ControllerClient([standby.address]).deploy(spec("B", "/b")))
        deadline = time.monotonic() + 10
        while len(routes_of(watcher.snapshots["routes"])) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert routes_of(watcher.snapshots["routes"]) == [("/a", "A"), ("/b", "B")]
    finally:
        await watcher.close()
