"""Passive health in the balancer (balancer.py), under a fake clock: a replica
that holds requests and answers none while others answer is ejected; slow
but answering replicas, all-slow pools and a pool's last replica are not."""

from __future__ import annotations

import pytest

from servefleet._private.dataplane import balancer
from servefleet._private.dataplane.balancer import ReplicaPool


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def pool_of(count: int, clock: Clock, ejected: list[str] | None = None) -> ReplicaPool:
    pool = ReplicaPool(max_ongoing=100, clock=clock,
                       on_eject=lambda r: (ejected if ejected is not None else []).append(
                           r.replica_id))
    pool.update([(f"r{i}", f"127.0.0.1:{9000 + i}") for i in range(count)], 100, -1)
    return pool


async def answer_once(pool: ReplicaPool, clock: Clock, replica_id: str,
                      took_s: float) -> None:
    replica = pool.replicas[replica_id]
    pool._busy(replica)
    replica.in_flight += 1
    sent = clock.now
    clock.now += took_s
    pool.note_answer(replica, sent)
    replica.in_flight -= 1


async def test_a_replica_holding_requests_and_answering_nothing_is_ejected() -> None:
    clock, ejected = Clock(), list[str]()
    pool = pool_of(2, clock, ejected)
    hung = pool.replicas["r0"]
    pool._busy(hung)
    hung.in_flight = hung.awaiting = 3  # three requests sent to it, none answered
    for _ in range(20):  # r1 keeps answering in 10 ms
        await answer_once(pool, clock, "r1", 0.01)
    clock.now += balancer.STALL_MIN_S  # past the threshold (10 x 10 ms < 1 s)
    picks = {(await pool.acquire()).replica_id for _ in range(20)}
    assert picks == {"r1"} and ejected == ["r0"]
    assert hung.ejected_until == pytest.approx(clock.now + balancer.EJECT_BASE_S)

    # Back after the period, on probation: one request at a time.
    clock.now += balancer.EJECT_BASE_S + 0.1
    hung.in_flight = hung.awaiting = 0  # its requests timed out meanwhile
    assert {r.replica_id for r in pool._candidates(set())} == {"r0", "r1"}
    pool._busy(hung)
    hung.in_flight = hung.awaiting = 1  # the one request it may hold on probation
    assert [r.replica_id for r in pool._candidates(set())] == ["r1"]
    # Hung again: ejected for twice as long.
    await answer_once(pool, clock, "r1", 0.01)
    clock.now += balancer.STALL_MIN_S + 0.1
    await answer_once(pool, clock, "r1", 0.01)
    pool._candidates(set())
    assert ejected == ["r0", "r0"]
    assert hung.ejected_until == pytest.approx(clock.now + 2 * balancer.EJECT_BASE_S)


async def test_a_slow_replica_that_answers_is_not_ejected() -> None:
    clock, ejected = Clock(), list[str]()
    pool = pool_of(2, clock, ejected)
    for _ in range(50):  # r0 takes 10x as long as r1, but answers
        await answer_once(pool, clock, "r1", 0.01)
        await answer_once(pool, clock, "r0", 0.1)
    slow = pool.replicas["r0"]
    pool._busy(slow)
    slow.in_flight = slow.awaiting = 1
    clock.now += 0.5  # a slow request under way, well within the threshold
    await answer_once(pool, clock, "r1", 0.01)
    assert len(pool._candidates(set())) == 2 and ejected == []


async def test_a_replica_streaming_a_long_answer_is_not_ejected() -> None:
    clock, ejected = Clock(), list[str]()
    pool = pool_of(2, clock, ejected)
    streaming = pool.replicas["r0"]
    pool._busy(streaming)
    streaming.in_flight = 1  # its answer began (headers came): awaiting is 0
    await answer_once(pool, clock, "r0", 0.01)
    for _ in range(100):  # 10 s of others' answers while the stream goes on
        await answer_once(pool, clock, "r1", 0.01)
        clock.now += 0.1
    assert len(pool._candidates(set())) == 2 and ejected == []


async def test_when_every_answer_is_slow_nobody_is_ejected() -> None:
    clock, ejected = Clock(), list[str]()
    pool = pool_of(2, clock, ejected)
    for _ in range(10):  # every request takes 5 s
        await answer_once(pool, clock, "r0", 5.0)
        await answer_once(pool, clock, "r1", 5.0)
    busy = pool.replicas["r0"]
    pool._busy(busy)
    busy.in_flight = busy.awaiting = 1
    clock.now += 4.0  # 4 s into a 5 s request, while r1 answered earlier
    assert ejected == [] and len(pool._candidates(set())) == 2


async def test_never_the_last_replica_nor_more_than_half_a_pool() -> None:
    clock, ejected = Clock(), list[str]()
    alone = pool_of(1, clock, ejected)
    replica = alone.replicas["r0"]
    alone._busy(replica)
    replica.in_flight = replica.awaiting = 1
    alone.last_answer = clock.now + 0.5  # as if answers came from elsewhere
    clock.now += 60
    assert alone._candidates(set()) == [replica] and ejected == []
    assert alone.unanswering(clock.now) == [replica]  # reported as a suspect instead

    pool = pool_of(4, clock, ejected)
    for rid in ("r0", "r1", "r2"):
        pool._busy(pool.replicas[rid])
        pool.replicas[rid].in_flight = pool.replicas[rid].awaiting = 1
    clock.now += 1
    await answer_once(pool, clock, "r3", 0.01)
    clock.now += balancer.STALL_MIN_S + 0.1
    await answer_once(pool, clock, "r3", 0.01)
    pool._candidates(set())
    assert len(ejected) == 2  # half of 4, though three hang
    assert [r.replica_id for r in pool.unanswering(clock.now)] == \
        sorted(set(ejected) ^ {"r0", "r1", "r2"})  # the third one: suspect


async def test_without_passive_health_nothing_is_ejected() -> None:
    clock, ejected = Clock(), list[str]()
    pool = pool_of(2, clock, ejected)
    pool.passive_health = False  # proxy --no-passive-health
    hung = pool.replicas["r0"]
    pool._busy(hung)
    hung.in_flight = hung.awaiting = 3
    await answer_once(pool, clock, "r1", 0.01)
    clock.now += 10
    await answer_once(pool, clock, "r1", 0.01)
    assert len(pool._candidates(set())) == 2 and ejected == []


async def test_a_snapshot_saying_the_controller_found_it_healthy_ends_an_ejection() -> None:
    clock, ejected = Clock(), list[str]()
    pool = pool_of(2, clock, ejected)
    endpoints = [(r.replica_id, r.address) for r in pool.replicas.values()]
    pool.update(endpoints, 100, -1, cleared={"r0": 3, "r1": 0})  # checks before this ejection
    hung = pool.replicas["r0"]
    assert pool.eject(hung) and hung.ejected_until > clock.now
    pool.update(endpoints, 100, -1, cleared={"r0": 3, "r1": 0})  # another change: still out
    assert [r.replica_id for r in pool._candidates(set())] == ["r1"]
    clock.now += 1.0
    pool.update(endpoints, 100, -1, cleared={"r0": 4, "r1": 0})  # checked at once: it answered
    assert {r.replica_id for r in pool._candidates(set())} == {"r0", "r1"}
    assert hung.probation  # one request at a time until it answers one
