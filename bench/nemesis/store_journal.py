"""Every revision the leaders wrote, from etcd's history of their journal key.

Each leader write puts "<term> <address>" in /servefleet/<cluster>/last-write
in the same transaction (controller/election.py, FencedStore), so watching
that key from revision 1 replays one event per leader write: its revision
and who wrote it (checks.terms_in_store). A run's etcd is never compacted,
so the whole history is there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
from aetcd import rpc

from nemesis.history import Write

READ_TIMEOUT_S = 60.0


class Compacted(Exception):
    """The store no longer has the history from revision 1."""


def leader_writes(endpoint: str, cluster: str) -> list[Write]:
    """The journal's history on the etcd member at `endpoint` (host:port)."""
    key = f"/servefleet/{cluster}/last-write".encode()
    with grpc.insecure_channel(endpoint) as channel:
        now = rpc.KVStub(channel).Range(rpc.RangeRequest(key=key), timeout=10)
        if not now.kvs:
            return []
        last = now.kvs[0].mod_revision
        done = threading.Event()

        def requests() -> Iterator[rpc.WatchRequest]:
            yield rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                key=key, start_revision=1))
            done.wait(READ_TIMEOUT_S)

        found: list[Write] = []
        call = rpc.WatchStub(channel).Watch(requests(), timeout=READ_TIMEOUT_S)
        try:
            for reply in call:
                if reply.compact_revision:
                    raise Compacted(f"etcd compacted its history up to revision "
                                    f"{reply.compact_revision}")
                for event in reply.events:
                    if event.type == rpc.Event.PUT:
                        term, _, controller = event.kv.value.decode().partition(" ")
                        found.append(Write(event.kv.mod_revision, int(term), controller))
                if found and found[-1].revision >= last:
                    break
        finally:
            done.set()
            call.cancel()
        return found
