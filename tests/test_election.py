"""Election and fencing in-process, against the real test etcd and the sqlite store."""

from __future__ import annotations

import asyncio

import pytest

from servefleet.controller.election import FencedStore, LeaderElection
from servefleet.controller.errors import NotLeader
from servefleet.controller.goals.deployments import DeploymentTable
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.store import Store
from servefleet.controller.store.etcd import EtcdStore
from servefleet.v1 import deployment_pb2 as d


def spec(name: str) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="m:C")


async def test_one_of_two_campaigners_wins_and_resign_hands_over(store: Store,
                                                                 cluster: str) -> None:
    key = ClusterKeys(cluster).leader
    a = LeaderElection(store, key, "a:1", ttl=5)
    b = LeaderElection(store, key, "b:1", ttl=5)
    tasks = {asyncio.create_task(a.campaign()): a, asyncio.create_task(b.campaign()): b}
    done, pending = await asyncio.wait(tasks, timeout=10, return_when=asyncio.FIRST_COMPLETED)
    assert len(done) == 1
    (winner_task,) = done
    winner, loser = tasks[winner_task], tasks[next(iter(pending))]
    assert winner.is_leader and not loser.is_leader
    kv = await store.get(key)
    assert kv is not None and kv.value.decode() == winner.identity
    assert kv.create_revision == winner.revision

    loop = asyncio.get_running_loop()
    resigned_at = loop.time()
    await winner.resign()
    (loser_task,) = pending
    await asyncio.wait_for(loser_task, 5)
    # Resigning deleted the key: the standby did not wait out the 5 s lease.
    assert loop.time() - resigned_at < 2.5
    assert loser.is_leader and not winner.is_leader
    await loser.resign()


async def test_hold_notices_an_expired_lease(store: Store, cluster: str) -> None:
    key = ClusterKeys(cluster).leader
    a = LeaderElection(store, key, "a:1", ttl=1)
    await a.campaign()
    # Someone ends the lease behind a's back (as etcd does when a was paused).
    kv = await store.get(key)
    assert kv is not None
    await store.revoke_lease(kv.lease)
    reason = await asyncio.wait_for(a.hold(), 5)
    assert "expired" in reason or "renewed" in reason
    assert not a.is_leader


async def test_refused_fenced_write_steps_down_and_writes_nothing(etcd, cluster: str) -> None:
    keys = ClusterKeys(cluster)
    store_a, store_b = EtcdStore([etcd.endpoint]), EtcdStore([etcd.endpoint])
    try:
        a = LeaderElection(store_a, keys.leader, "a:1", ttl=1)
        token = await a.campaign()
        table = DeploymentTable(keys, FencedStore(store_a, a, keys.leader, token), store_a)
        await table.load(store_a)
        await table.deploy(spec("one"))

        # a stops renewing (paused, partitioned); its lease runs out and b wins.
        b = LeaderElection(store_b, keys.leader, "b:1", ttl=5)
        await asyncio.wait_for(b.campaign(), 10)
        assert a.is_leader, "a has not noticed yet: only the guard can stop it"

        with pytest.raises(NotLeader):
            await table.deploy(spec("two"))
        assert not a.is_leader
        stored = [kv.key for kv in await store_b.list_prefix(keys.deployments)]
        assert stored == [keys.deployment("default", "one")]
        # The term ends with the guard's reason, and later writes are refused locally.
        reason = await asyncio.wait_for(a.hold(), 5)
        assert "refused" in reason
        with pytest.raises(NotLeader):
            await table.delete("default", ["one"])
        assert len(await store_b.list_prefix(keys.deployments)) == 1
        kv = await store_b.get(keys.leader)
        assert kv is not None and kv.value == b"b:1"
        await b.resign()
    finally:
        await store_a.close()
        await store_b.close()


class SlowStore:
    """A real store whose transactions take a while: room to cancel a caller mid-write."""

    def __init__(self, inner: Store, delay: float) -> None:
        self._inner, self._delay = inner, delay

    async def txn(self, guards, ops):
        await asyncio.sleep(self._delay)
        return await self._inner.txn(guards, ops)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


async def test_cancelled_write_keeps_memory_and_store_in_step(store: Store,
                                                               cluster: str) -> None:
    keys = ClusterKeys(cluster)
    slow = SlowStore(store, 0.3)
    election = LeaderElection(slow, keys.leader, "a:1", ttl=10)
    token = await election.campaign()
    table = DeploymentTable(keys, FencedStore(slow, election, keys.leader, token), slow)
    await table.load(slow)
    caller = asyncio.create_task(table.deploy(spec("m")))
    await asyncio.sleep(0.1)
    caller.cancel()  # the client's deadline ran out mid-write
    with pytest.raises(asyncio.CancelledError):
        await caller
    for _ in range(100):  # the shielded write goes on: wait for it to land
        stored = await store.get(keys.deployment("default", "m"))
        if stored is not None:
            break
        await asyncio.sleep(0.02)
    assert stored is not None, "the shielded write went on"
    # Memory follows once the transaction's answer is back (the store can show
    # the key a moment earlier: seen in a CI run).
    for _ in range(100):
        if any(r.spec.name == "m" for r in table.live()):
            break
        await asyncio.sleep(0.02)
    assert table.get("default", "m").version
    # Retrying the acknowledged-or-not deploy is a no-op, in memory and in the store.
    assert (await table.deploy(spec("m")))[1] is False
    await election.resign()
