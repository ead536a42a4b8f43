"""Proxy routing and replica choice, pure (no servers)."""

from __future__ import annotations

import asyncio

import pytest

from servefleet._private.dataplane.balancer import Overloaded, ReplicaPool
from servefleet.proxy.routes import RouteTable, Target


def table(*prefixes: str) -> RouteTable:
    return RouteTable([Target(p, "app", p.strip("/") or "root") for p in prefixes])


@pytest.mark.parametrize(("path", "expected"), [
    ("/", "root"), ("/other", "root"), ("/api", "api"), ("/api/", "api"),
    ("/api/v1/x", "api/v1"), ("/api/v1", "api/v1"), ("/apix", "root"), ("/api/v10", "api"),
])
def test_longest_prefix_wins(path: str, expected: str) -> None:
    match = table("/", "/api", "/api/v1").match(path)
    assert match is not None and match.deployment == expected


def test_no_route() -> None:
    assert table("/api").match("/other") is None
    assert table().match("/") is None


async def test_power_of_two_choices_respects_the_limit() -> None:
    pool = ReplicaPool()
    pool.update([("a", "h:1"), ("b", "h:2"), ("c", "h:3")], max_ongoing=2, max_queued=-1)
    held = [await pool.acquire() for _ in range(6)]
    assert sorted(r.in_flight for r in pool.replicas.values()) == [2, 2, 2]
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done() and pool.queued == 1
    pool.release(held[0])
    replica = await asyncio.wait_for(waiter, 1)
    assert replica is held[0]
    assert max(r.in_flight for r in pool.replicas.values()) == 2


async def test_queue_limit_gives_overloaded() -> None:
    pool = ReplicaPool()
    pool.update([("a", "h:1")], max_ongoing=1, max_queued=1)
    await pool.acquire()
    queued = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    with pytest.raises(Overloaded):
        await pool.acquire()
    queued.cancel()


async def test_requests_wait_for_the_first_replicas() -> None:
    pool = ReplicaPool()
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    pool.update([("a", "h:1")], max_ongoing=5, max_queued=-1)
    assert (await asyncio.wait_for(waiter, 1)).replica_id == "a"


async def test_a_replica_marked_down_is_skipped_until_the_next_snapshot() -> None:
    pool = ReplicaPool()
    pool.update([("a", "h:1"), ("b", "h:2")], max_ongoing=5, max_queued=-1)
    pool.mark_down(pool.replicas["a"])
    assert {(await pool.acquire()).replica_id for _ in range(5)} == {"b"}
    pool.update([("a", "h:1"), ("b", "h:2")], max_ongoing=5, max_queued=-1)
    picked = {(await pool.acquire()).replica_id for _ in range(4)}
    assert "a" in picked


def test_load_reports_sum_fresh_reports_and_refuse_bad_ones() -> None:
    from fakes import FakeClock

    from servefleet.controller.errors import InvalidArgument
    from servefleet.controller.load_reports import STALE_S, LoadReports

    clock = FakeClock()
    load = LoadReports(clock)
    load.record("p1", {"app/A": 3})
    load.record("p2", {"app/A": 2, "app/B": 1})
    assert load.queued("app", "A") == 5 and load.queued("app", "B") == 1
    load.record("p1", {"app/A": 0})  # a newer report replaces the older
    assert load.queued("app", "A") == 2
    clock.advance(STALE_S + 1)
    assert load.queued("app", "A") == 0
    for bad in ({"noslash": 1}, {"app/bad name": 1}):
        with pytest.raises(InvalidArgument):
            load.record("p3", bad)
    with pytest.raises(InvalidArgument):
        load.record("", {})


def test_load_totals_add_queued_and_ongoing_across_reporters() -> None:
    from fakes import FakeClock

    from servefleet.controller.errors import InvalidArgument
    from servefleet.controller.load_reports import STALE_S, LoadReports

    clock = FakeClock()
    load = LoadReports(clock)
    load.record("proxy-1", {"app/A": 2}, {"app/A": 5, "app/B": 1})
    load.record("handle-1", {}, {"app/A": 3})
    assert (load.total("app", "A"), load.queued("app", "A"), load.total("app", "B")) == (
        10, 2, 1)
    with pytest.raises(InvalidArgument, match="ongoing"):
        load.record("proxy-1", {"app/A": 100}, {"nope": 2})
    assert load.total("app", "A") == 10, "a refused report changes nothing"
    clock.advance(STALE_S / 2)
    load.record("handle-1", {}, {})  # its requests were answered
    assert load.total("app", "A") == 7
    clock.advance(STALE_S / 2 + 1)  # proxy-1 went quiet: its report is stale
    assert load.total("app", "A") == 0 and load.total("app", "B") == 0


async def test_a_slot_handed_to_a_leaving_waiter_goes_to_the_next() -> None:
    pool = ReplicaPool()
    pool.update([("a", "h:1")], max_ongoing=1, max_queued=-1)
    held = await pool.acquire()
    leaving = asyncio.create_task(pool.acquire())
    staying = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    pool.release(held)  # handed to `leaving`...
    leaving.cancel()  # ...which goes away before it runs
    await asyncio.sleep(0)
    assert (await asyncio.wait_for(staying, 1)).replica_id == "a"
    assert pool.replicas["a"].in_flight == 1


async def test_queue_is_first_come_first_served() -> None:
    pool = ReplicaPool()
    pool.update([("a", "h:1")], max_ongoing=1, max_queued=-1)
    held = await pool.acquire()
    first = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    pool.release(held)
    newcomer = asyncio.create_task(pool.acquire())  # arrives as the slot frees up
    await asyncio.sleep(0.01)
    assert first.done() and not newcomer.done()
    pool.release(first.result())
    assert (await asyncio.wait_for(newcomer, 1)).replica_id == "a"


async def test_retry_may_go_back_to_the_only_replica() -> None:
    pool = ReplicaPool()
    pool.update([("a", "h:1")], max_ongoing=5, max_queued=-1)
    replica = await asyncio.wait_for(pool.acquire(exclude={"a"}), 1)
    assert replica.replica_id == "a"


async def test_request_targets_with_line_breaks_are_refused() -> None:
    from servefleet._private.dataplane.upstream import UpstreamError, UpstreamPool

    with pytest.raises(UpstreamError):
        await UpstreamPool().request("127.0.0.1:1", "GET", b"/x HTTP/1.1\r\nx-evil: 1", [], b"")


async def test_closing_a_pool_fails_its_queued_requests() -> None:
    from servefleet._private.dataplane.balancer import PoolClosed

    pool = ReplicaPool()
    waiter = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    pool.close()
    with pytest.raises(PoolClosed):
        await asyncio.wait_for(waiter, 1)
