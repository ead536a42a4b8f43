"""proxy/websocket.py's handshake to replicas, against tiny WebSocket servers
in this process: refusals the replica never acted on go to another replica,
other refusals come back as they were."""

from __future__ import annotations

import asyncio

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.testing import free_port
from servefleet.proxy.websocket import Denied, open_upstream

SCOPE = {"type": "websocket", "headers": [], "subprotocols": []}


def refusing(status: int, rejected: str = ""):
    def process(connection: ServerConnection, request: Request) -> Response:
        response = connection.respond(status, "full" if rejected else "nope\n")
        if rejected:
            response.headers["x-servefleet-rejected"] = rejected
        return response
    return process


async def echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


async def test_a_handshake_refused_unread_goes_to_another_replica() -> None:
    full_port, ok_port, gone_port = free_port(), free_port(), free_port()
    async with serve(echo, "127.0.0.1", full_port, process_request=refusing(503, "overloaded")), \
            serve(echo, "127.0.0.1", ok_port):
        for i in range(10):
            pool = ReplicaPool(key=("app", "ws"))
            pool.update([("full", f"127.0.0.1:{full_port}"), ("ok", f"127.0.0.1:{ok_port}"),
                         ("gone", f"127.0.0.1:{gone_port}")], 5, -1)
            replica, upstream = await open_upstream(pool, SCOPE, [], b"/x", 5, f"r{i}")
            assert replica.replica_id == "ok" and pool.ongoing == 1
            await upstream.send("hi")
            assert await upstream.recv() == "hi"
            await upstream.close()
            pool.release(replica)


async def test_other_refusals_reach_the_client_as_they_came() -> None:
    port = free_port()
    async with serve(echo, "127.0.0.1", port, process_request=refusing(403)):
        pool = ReplicaPool(key=("app", "ws"))
        pool.update([("r0", f"127.0.0.1:{port}")], 5, -1)
        with pytest.raises(Denied) as denied:
            await open_upstream(pool, SCOPE, [], b"/x", 5, "r")
        assert (denied.value.status, denied.value.text) == (403, "nope\n")
        assert pool.ongoing == 0  # the slot is given back
    # Its only replica unreachable: the handshake waits for a replica set
    # naming another (as an HTTP request does), until the caller's timeout.
    pool = ReplicaPool(key=("app", "ws"))
    pool.update([("r0", f"127.0.0.1:{free_port()}")], 5, -1)  # nothing listens
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(open_upstream(pool, SCOPE, [], b"/x", 5, "r"), 1)
    assert pool.ongoing == 0 and pool.queued == 0


async def test_leaving_replicas_make_the_handshake_wait_for_the_next_replica_set() -> None:
    """A rollout the proxy has not heard the end of (cut off from the
    controllers, say): its set names only old replicas, draining or gone.
    The handshake waits for the set that names a new one, as an HTTP request
    does (found by the chaos suite: WebSockets answered 503)."""
    draining = [free_port(), free_port()]
    fresh, gone = free_port(), free_port()
    async with serve(echo, "127.0.0.1", draining[0], process_request=refusing(503, "draining")), \
            serve(echo, "127.0.0.1", draining[1], process_request=refusing(503, "draining")), \
            serve(echo, "127.0.0.1", fresh):
        pool = ReplicaPool(key=("app", "ws"))
        old = [("d0", f"127.0.0.1:{draining[0]}"), ("d1", f"127.0.0.1:{draining[1]}"),
               ("gone", f"127.0.0.1:{gone}")]
        pool.update(old, 5, -1)
        handshake = asyncio.create_task(open_upstream(pool, SCOPE, [], b"/x", 5, "r"))
        await asyncio.sleep(0.3)
        assert not handshake.done() and pool.queued == 1
        pool.update([*old, ("new", f"127.0.0.1:{fresh}")], 5, -1)
        replica, upstream = await asyncio.wait_for(handshake, 5)
        assert replica.replica_id == "new"
        await upstream.close()
        pool.release(replica)
