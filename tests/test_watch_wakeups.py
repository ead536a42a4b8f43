"""A change wakes only the Watch streams whose patterns match its key
(controller/watch.py, Publisher.next_change): unit tests."""

from __future__ import annotations

import asyncio

from servefleet.controller.watch import Heartbeat, Publisher
from servefleet.v1 import watch_pb2


def replica_set(name: str) -> watch_pb2.ReplicaSet:
    return watch_pb2.ReplicaSet(application="app", deployment=name)


async def waiting(publisher: Publisher, patterns: tuple[str, ...]) -> asyncio.Task[bool]:
    beat = Heartbeat(30.0)
    beat.sent()
    task = asyncio.create_task(publisher.next_change(publisher.generation, beat, patterns))
    task.add_done_callback(lambda _: beat.stop())
    await asyncio.sleep(0)  # it waits now
    return task


async def test_a_change_wakes_the_streams_that_watch_its_key_only() -> None:
    publisher = Publisher()
    proxy = await waiting(publisher, ("replicas/", "routes"))
    replica_a = await waiting(publisher, ("config/app/A", "routes"))
    replica_b = await waiting(publisher, ("config/app/B", "routes"))
    everything = await waiting(publisher, ())
    publisher.publish("replicas/app/A", replicas=replica_set("A"))
    await asyncio.sleep(0)
    assert proxy.done() and everything.done()
    assert not replica_a.done() and not replica_b.done()
    publisher.publish("config/app/A", config=watch_pb2.DeploymentConfig(version="v2"))
    await asyncio.sleep(0)
    assert replica_a.done() and not replica_b.done()
    publisher.publish("routes", routes=watch_pb2.RouteTable())
    await asyncio.sleep(0)
    assert replica_b.done()
    assert all(t.result() is True for t in (proxy, replica_a, replica_b, everything))


async def test_the_end_of_the_term_wakes_every_stream() -> None:
    publisher = Publisher()
    tasks = [await waiting(publisher, ("config/app/A",)), await waiting(publisher, ("routes",))]
    publisher.close()
    assert await asyncio.gather(*tasks) == [True, True]


async def test_a_stream_not_woken_still_gets_what_it_watches_next() -> None:
    """Changes to other keys move the generation on: the next wait of a
    stream that slept through them returns at once, and its diff is empty."""
    publisher = Publisher()
    known = {"config/app/A": ""}
    publisher.publish("config/app/A", config=watch_pb2.DeploymentConfig(version="v1"))
    assert len(publisher.diff(["config/app/A"], known)) == 1
    seen = publisher.generation
    waiter = await waiting(publisher, ("config/app/A",))
    for name in "BCD":
        publisher.publish(f"replicas/app/{name}", replicas=replica_set(name))
    await asyncio.sleep(0)
    assert not waiter.done()
    assert publisher.diff(["config/app/A"], known, since=seen) == []
    publisher.publish("config/app/A", config=watch_pb2.DeploymentConfig(version="v2"))
    assert await waiter is True
    (response,) = publisher.diff(["config/app/A"], known, since=seen)
    assert response.snapshot.config.version == "v2"
