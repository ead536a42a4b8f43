"""Every revision the leaders wrote, from etcd's history of their journal key.

Each leader write puts "<term> <address>" in /servefleet/<cluster>/last-write
in the same transaction (controller/election.py, FencedStore), so watching
that key from revision 1 replays one event per leader write: its revision
and who wrote it (checks.terms_in_store). A run's etcd is never compacted,
so the whole history is there.

`process_starts` reads the replica registry's history the same way: the
record a leader writes once the runtime started a replica names its
process ("pid:start time", the start in clock ticks since boot, which the
kernel recorded): when each process started, by the runtime's own record,
and which term wrote it (checks.starts_within_terms).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from aetcd import rpc
from aetcd.utils import prefix_range_end

from nemesis.history import Start, Write
from servefleet.v1 import replica_pb2

READ_TIMEOUT_S = 60.0
QUIET_S = 1.0


class Compacted(Exception):
    """The store no longer has the history from revision 1."""


def leader_writes(endpoint: str, cluster: str) -> list[Write]:
    """The journal's history on the etcd member at `endpoint` (host:port)."""
    found = []
    for revision, value in _history(endpoint, f"/servefleet/{cluster}/last-write", False):
        term, _, controller = value.decode().partition(" ")
        found.append(Write(revision, int(term), controller))
    return found


def process_starts(endpoint: str, cluster: str, writes: list[Write]) -> list[Start]:
    """Each replica process the registry's history names, once: when it
    started (wall clock, from its start in ticks since boot) and the term
    that first wrote its record with it. Containers (handles that are no
    "pid:ticks") are not read."""
    terms = {w.revision: w.term for w in writes}
    boot = time.time() - float(Path("/proc/uptime").read_text().split()[0])
    ticks = os.sysconf("SC_CLK_TCK")
    found: dict[str, Start] = {}
    for revision, value in _history(endpoint, f"/servefleet/{cluster}/replicas/", True):
        record = replica_pb2.ReplicaRecord.FromString(value)
        pid, _, started = record.handle.partition(":")
        if (pid.isdigit() and started.isdigit() and record.handle not in found
                and revision in terms):
            found[record.handle] = Start(record.replica_id, terms[revision],
                                         boot + int(started) / ticks)
    return list(found.values())


def _history(endpoint: str, key: str, prefix: bool) -> list[tuple[int, bytes]]:
    """(revision, value) of every put to `key` (or under it, with `prefix`)
    since revision 1, in order: etcd sends a watch's history at once after
    creating it, so the read ends once nothing came for QUIET_S."""
    raw = key.encode()
    end = prefix_range_end(raw) if prefix else b""
    done = threading.Event()
    found: list[tuple[int, bytes]] = []
    failed: list[BaseException] = []

    def requests() -> Iterator[rpc.WatchRequest]:
        yield rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
            key=raw, range_end=end, start_revision=1))
        done.wait(READ_TIMEOUT_S)

    with grpc.insecure_channel(endpoint) as channel:
        call = rpc.WatchStub(channel).Watch(requests(), timeout=READ_TIMEOUT_S)

        def read() -> None:
            try:
                for reply in call:
                    if reply.compact_revision:
                        raise Compacted(f"etcd compacted its history up to revision "
                                        f"{reply.compact_revision}")
                    found.extend((e.kv.mod_revision, e.kv.value) for e in reply.events
                                 if e.type == rpc.Event.PUT)
            except grpc.RpcError:
                pass  # cancelled below
            except BaseException as e:
                failed.append(e)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        seen, deadline = -1, time.monotonic() + READ_TIMEOUT_S
        while len(found) != seen and time.monotonic() < deadline and not failed:
            seen = len(found)
            time.sleep(QUIET_S)
        done.set()
        call.cancel()
        reader.join(5)
    if failed:
        raise failed[0]
    return sorted(found, key=lambda f: f[0])
