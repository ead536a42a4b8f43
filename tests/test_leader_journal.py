"""Every leader write journals its term and writer in the same transaction
(controller/election.py, FencedStore): read back from the real etcd's
history by the chaos suite's reader (bench/nemesis/store_journal.py), a
deposed leader's refused write leaves nothing, and terms only grow."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import psutil
import pytest

from servefleet.controller.election import FencedStore, LeaderElection
from servefleet.controller.errors import NotLeader
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.store.base import Put
from servefleet.controller.store.etcd import EtcdStore
from servefleet.v1 import replica_pb2

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from nemesis import checks
from nemesis.history import Write
from nemesis.store_journal import leader_writes, process_starts


async def test_the_store_history_names_the_term_of_every_leader_write(etcd,
                                                                      cluster: str) -> None:
    keys = ClusterKeys(cluster)
    store_a, store_b = EtcdStore([etcd.endpoint]), EtcdStore([etcd.endpoint])
    try:
        a = LeaderElection(store_a, keys.leader, "a:1", ttl=1)
        token_a = await a.campaign()
        fenced_a = FencedStore(store_a, a, keys.leader, token_a, journal_key=keys.last_write)
        first = await fenced_a.commit([Put(keys.deployment("app", "one"), b"1")])
        second = await fenced_a.commit([Put(keys.deployment("app", "two"), b"2")])
        b = LeaderElection(store_b, keys.leader, "b:1", ttl=5)  # a's lease runs out
        token_b = await asyncio.wait_for(b.campaign(), 10)
        fenced_b = FencedStore(store_b, b, keys.leader, token_b, journal_key=keys.last_write)
        with pytest.raises(NotLeader):
            await fenced_a.commit([Put(keys.deployment("app", "late"), b"3")])
        third = await fenced_b.commit([Put(keys.deployment("app", "one"), b"4")])

        writes = await asyncio.to_thread(leader_writes, etcd.endpoint, cluster)
        assert writes == [Write(first, token_a, "a:1"), Write(second, token_a, "a:1"),
                          Write(third, token_b, "b:1")]
        assert checks.terms_in_store(writes).ok

        # A replica record naming a process: when it started, by the kernel's
        # record (this test's own process), and which term registered it.
        ticks = _start_ticks()
        record = replica_pb2.ReplicaRecord(replica_id="M-1", application="app",
                                           deployment="M", handle=f"{os.getpid()}:{ticks}")
        await fenced_b.commit([Put(keys.replica("app", "M", "M-1"),
                                   record.SerializeToString())])
        writes = await asyncio.to_thread(leader_writes, etcd.endpoint, cluster)
        (start,) = await asyncio.to_thread(process_starts, etcd.endpoint, cluster, writes)
        assert (start.replica_id, start.term) == ("M-1", token_b)
        # psutil counts from the boot time in whole seconds; this, from the uptime.
        assert abs(start.time - psutil.Process().create_time()) < 1.0
        await b.resign()
    finally:
        await store_a.close()
        await store_b.close()


def _start_ticks() -> str:
    """This process's start, in clock ticks since boot (/proc/self/stat, field 22)."""
    return Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
