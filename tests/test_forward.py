"""Forward-with-retry (servefleet/_private/dataplane/forward.py) against tiny loopback servers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from servefleet._private.dataplane import balancer
from servefleet._private.dataplane.balancer import ReplicaPool
from servefleet._private.dataplane.forward import MAX_ATTEMPTS, NoReplicaTook, forward
from servefleet._private.dataplane.upstream import Response, UpstreamError, UpstreamPool
from servefleet._private.testing import free_port

REJECTED = b"HTTP/1.1 503 Service Unavailable\r\nx-servefleet-rejected: overloaded\r\n" \
           b"content-length: 4\r\n\r\nbusy"
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
CUT = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nok"  # closes 8 bytes short
HANG = b"hang"  # takes the request and never answers (a stopped process)
DRAINING = b"HTTP/1.1 503 Service Unavailable\r\nx-servefleet-rejected: draining\r\n" \
           b"connection: close\r\ncontent-length: 8\r\n\r\ndraining"


async def _serve(answer: bytes, seen: list[bytes]) -> tuple[asyncio.Server, str]:
    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while head := await reader.readuntil(b"\r\n\r\n"):
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                seen.append(head.split(b" ")[1] + await reader.readexactly(length))
                if answer is HANG:
                    await reader.read()  # until the caller gives up and closes
                    break
                writer.write(answer)
                await writer.drain()
                if answer is CUT:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamPool]:
    pool = UpstreamPool()
    yield pool
    pool.close()


@pytest.fixture
async def replicas() -> AsyncIterator[Callable]:
    servers: list[asyncio.Server] = []

    async def start(*answers: bytes) -> tuple[ReplicaPool, dict[str, list[bytes]]]:
        pool, seen = ReplicaPool(), dict[str, list[bytes]]()
        endpoints = []
        for i, answer in enumerate(answers):
            seen[f"r{i}"] = []
            if answer == b"":  # nothing listens there
                endpoints.append((f"r{i}", f"127.0.0.1:{free_port()}"))
                continue
            server, address = await _serve(answer, seen[f"r{i}"])
            servers.append(server)
            endpoints.append((f"r{i}", address))
        pool.update(endpoints, max_ongoing=5, max_queued=-1)
        return pool, seen

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def _body(response: Response) -> tuple[int, bytes]:
    return response.status, b"".join([c async for c in response.chunks()])


async def test_a_refusal_is_retried_on_another_replica(replicas, upstream) -> None:
    pool, seen = await replicas(REJECTED, OK)
    for _ in range(4):
        assert await forward(pool, upstream, "POST", b"/x", [], b"hi", _body) == (200, b"ok")
    assert len(seen["r1"]) == 4 and all(s == b"/xhi" for s in seen["r1"])
    assert all(r.in_flight == 0 for r in pool.replicas.values())
    # A replica that refused a request unread is not set aside.
    assert {(await pool.acquire()).replica_id for _ in range(4)} == {"r0", "r1"}


async def test_a_replica_refusing_connections_is_set_aside(replicas, upstream) -> None:
    pool, _ = await replicas(b"", OK)
    pool.max_ongoing = 1
    held = await pool.acquire(exclude={"r0"})  # r1 is full: the call goes to r0 first
    call = asyncio.create_task(forward(pool, upstream, "GET", b"/", [], b"", _body))
    await asyncio.sleep(0.1)
    assert not call.done() and pool.queued == 1, "r0 refused: the call waits for r1"
    pool.release(held)
    assert await asyncio.wait_for(call, 5) == (200, b"ok")
    assert (await pool.acquire()).replica_id == "r1"
    with pytest.raises(TimeoutError):  # r0 stays aside, so nothing else has room
        await asyncio.wait_for(pool.acquire(), 0.1)


async def test_gives_up_after_max_attempts(replicas, upstream) -> None:
    pool, seen = await replicas(REJECTED, REJECTED, REJECTED, REJECTED)
    with pytest.raises(NoReplicaTook):
        await forward(pool, upstream, "GET", b"/", [], b"", _body)
    assert sum(len(s) for s in seen.values()) == MAX_ATTEMPTS
    assert all(r.in_flight == 0 for r in pool.replicas.values())


async def test_draining_replicas_make_the_request_wait_for_the_next_replica_set(
        replicas, upstream) -> None:
    """A rollout: the caller's replica set still names only the old replicas,
    which drain. The request waits for the set that names the new ones
    instead of giving up (found by the chaos suite: a handle call answered 500)."""
    pool, seen = await replicas(DRAINING, DRAINING)
    call = asyncio.create_task(forward(pool, upstream, "POST", b"/", [], b"x", _body))
    await asyncio.sleep(0.2)
    assert not call.done() and pool.queued == 1
    assert [len(s) for s in seen.values()] == [1, 1], "each draining replica asked once"
    fresh, _ = await replicas(OK)
    pool.update([("r9", fresh.replicas["r0"].address)], 5, -1)
    assert await asyncio.wait_for(call, 5) == (200, b"ok")


async def test_a_dead_replica_still_named_costs_no_attempt(replicas, upstream) -> None:
    """Snapshots that still name a replica whose connections are refused (it
    died; the controller has not noticed yet) each cost one refused try; the
    request waits on until a replica that listens is named."""
    pool, _ = await replicas(b"")
    dead = [(r.replica_id, r.address) for r in pool.replicas.values()]
    call = asyncio.create_task(forward(pool, upstream, "POST", b"/", [], b"x", _body))
    for _ in range(MAX_ATTEMPTS + 1):
        await asyncio.sleep(0.1)
        assert not call.done() and pool.queued == 1
        pool.update(dead, 5, -1)  # another change elsewhere: the dead one still named
    fresh, _ = await replicas(OK)
    pool.update([*dead, ("r9", fresh.replicas["r0"].address)], 5, -1)
    assert await asyncio.wait_for(call, 5) == (200, b"ok")


async def test_a_failure_after_sending_is_not_retried(replicas, upstream) -> None:
    pool, seen = await replicas(CUT, CUT)
    with pytest.raises(UpstreamError) as failure:
        await forward(pool, upstream, "POST", b"/", [], b"", _body)
    assert sum(len(s) for s in seen.values()) == 1
    assert failure.value.address in {r.address for r in pool.replicas.values()}
    assert all(r.in_flight == 0 for r in pool.replicas.values())


async def test_cancelling_frees_the_slot(replicas, upstream) -> None:
    pool, _ = await replicas(OK)

    async def stuck(response: Response) -> None:
        await asyncio.sleep(60)

    call = asyncio.create_task(forward(pool, upstream, "GET", b"/", [], b"", stuck))
    await asyncio.sleep(0.1)
    assert pool.replicas["r0"].in_flight == 1
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert pool.replicas["r0"].in_flight == 0


async def test_a_get_held_by_a_hung_replica_goes_to_another(replicas, upstream,
                                                            monkeypatch) -> None:
    monkeypatch.setattr(balancer, "STALL_MIN_S", 0.2)
    pool, seen = await replicas(HANG, OK)
    ok = pool.replicas["r1"]
    ok.in_flight = pool.max_ongoing  # full for a moment: the first request goes to r0
    first = asyncio.create_task(forward(pool, upstream, "GET", b"/a", [], b"", _body))
    await asyncio.sleep(0.05)
    ok.in_flight = 0
    assert seen["r0"] == [b"/a"]
    # r1 answers others meanwhile: r0 holding /a without answering is hung.
    assert await forward(pool, upstream, "GET", b"/b", [], b"", _body) == (200, b"ok")
    assert await asyncio.wait_for(first, 5) == (200, b"ok")
    assert seen["r1"] == [b"/b", b"/a"]
    assert pool.replicas["r0"].ejections == 1


async def test_a_post_held_by_a_hung_replica_is_not_sent_again(replicas, upstream,
                                                               monkeypatch) -> None:
    monkeypatch.setattr(balancer, "STALL_MIN_S", 0.2)
    pool, seen = await replicas(HANG, OK)
    ok = pool.replicas["r1"]
    ok.in_flight = pool.max_ongoing
    post = asyncio.create_task(forward(pool, upstream, "POST", b"/a", [], b"x", _body))
    await asyncio.sleep(0.05)
    ok.in_flight = 0
    assert await forward(pool, upstream, "GET", b"/b", [], b"", _body) == (200, b"ok")
    await asyncio.sleep(0.6)  # three stall periods
    assert not post.done() and seen["r1"] == [b"/b"]  # the replica may act on it: no retry
    post.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await post


async def _held_by_a_hung_replica(replicas, upstream, monkeypatch, retry_methods: list[str],
                                  method: str):
    """A `method` request sent to a hung r0 while r1 answers another one; the
    request's task, and what each replica saw."""
    monkeypatch.setattr(balancer, "STALL_MIN_S", 0.2)
    pool, seen = await replicas(HANG, OK)
    pool.update([(r.replica_id, r.address) for r in pool.replicas.values()],
                pool.max_ongoing, pool.max_queued, retry_methods=retry_methods)
    ok = pool.replicas["r1"]
    ok.in_flight = pool.max_ongoing  # full for a moment: the request goes to r0
    held = asyncio.create_task(forward(pool, upstream, method, b"/a", [], b"", _body))
    await asyncio.sleep(0.05)
    ok.in_flight = 0
    assert seen["r0"] == [b"/a"]
    assert await forward(pool, upstream, "GET", b"/b", [], b"", _body) == (200, b"ok")
    return held, seen


async def test_a_post_goes_to_another_replica_when_the_deployment_lists_it(
        replicas, upstream, monkeypatch) -> None:
    post, seen = await _held_by_a_hung_replica(replicas, upstream, monkeypatch,
                                               ["POST", "GET"], "POST")
    assert await asyncio.wait_for(post, 5) == (200, b"ok")
    assert seen["r1"] == [b"/b", b"/a"]


async def test_the_deployment_list_replaces_the_default(replicas, upstream,
                                                        monkeypatch) -> None:
    get, seen = await _held_by_a_hung_replica(replicas, upstream, monkeypatch, ["POST"], "GET")
    await asyncio.sleep(0.6)  # three stall periods
    assert not get.done() and seen["r1"] == [b"/b"]
    get.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await get


def test_an_empty_retry_methods_means_get_and_head() -> None:
    pool = balancer.ReplicaPool()
    pool.update([("r0", "127.0.0.1:1")], 5, -1, retry_methods=["PUT"])
    assert pool.retry_methods == {"PUT"}
    pool.update([("r0", "127.0.0.1:1")], 5, -1)
    assert pool.retry_methods == {"GET", "HEAD"}
