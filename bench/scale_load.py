"""Simulated proxies and handles for bench/scale.py: N Watch streams, N load reporters.

    .venv/bin/python bench/scale_load.py --controllers A,B --watchers N --reporters N
                                         [--report-interval-s 1] [--deployments app/d,...]

Each watcher is servefleet's own Watch client (the one proxies and handles
run), kind PROXY, on the keys a proxy watches ("routes" and "replicas/"),
with a channel of its own as a proxy on its own host has. It applies every
snapshot it gets (the client keeps the latest of each key) and records when
it saw it. The first --reporters of them also run servefleet's load
reporter (a StreamLoad stream to the leader), each with load on three
deployments, so it reports every interval, and naming the replica sets its
watcher applied, as a proxy does. With --sim-socket it also holds the
Watch stream each simulated replica would (scale_replica_watch.py).

Commands come on stdin, one JSON object a line, and are answered on stdout
in order, one JSON line each:
    {"op": "ready", "timeout": S}     every watcher has its first route table
    {"op": "seen", "key": K, "after": T, "timeout": S,
     "has"|"lacks": ID, or "count"|"more_than": N}
        per watcher, seconds from T (wall clock) to the first snapshot of K
        after T that has (lacks) replica ID, or has N (more than N)
        endpoints; null if none came within the timeout
    {"op": "replicas ready", "timeout": S}
                                      the simulated replicas' Watch streams answered
    {"op": "load", "deployment": "app/d", "ongoing": N}
                                      each reporter has N more requests in flight there
    {"op": "stats"}                   snapshots received, report periods
    {"op": "quit"}
A bad command is answered {"error": "..."}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from types import SimpleNamespace
from typing import Any

from scale_replica_watch import ReplicaWatchers

from servefleet._private.dataplane.load_report import EngineLoad, LoadReporter
from servefleet._private.security.tls import PLAIN
from servefleet._private.watch_client import WatchClient
from servefleet.v1 import watch_pb2

POLL_S = 0.02


class Watchers:
    def __init__(self, controllers: list[str], count: int, prefix: str) -> None:
        # Per watcher, per key: (time seen, snapshot id), in order.
        self.seen: list[dict[str, list[tuple[float, str]]]] = [{} for _ in range(count)]
        # Replica ids of each replica-set snapshot, decoded once for all watchers.
        self.ids: dict[str, frozenset[str]] = {}
        self.snapshots = 0
        self.clients = [
            WatchClient(controllers, ["routes", "replicas/"], kind=watch_pb2.WATCHER_KIND_PROXY,
                        watcher_id=f"{prefix}-w{i}", credentials=PLAIN,
                        on_snapshot=self._recorder(i))
            for i in range(count)]

    def _recorder(self, index: int):
        log = self.seen[index]

        def record(snapshot: watch_pb2.Snapshot) -> None:
            now = time.time()
            self.snapshots += 1
            if snapshot.snapshot_id not in self.ids and snapshot.HasField("replicas"):
                self.ids[snapshot.snapshot_id] = frozenset(
                    e.replica_id for e in snapshot.replicas.endpoints)
            log.setdefault(snapshot.key, []).append((now, snapshot.snapshot_id))
        return record

    def start(self) -> None:
        for client in self.clients:
            client.start()

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.clients))

    def first(self, index: int, key: str, after: float, test) -> float | None:
        for t, snapshot_id in self.seen[index].get(key, ()):
            if t >= after and test(self.ids.get(snapshot_id, frozenset())):
                return t - after
        return None

    async def wait_seen(self, key: str, after: float, test, timeout: float) -> list:
        deadline = time.monotonic() + timeout
        found: list[float | None] = [None] * len(self.clients)
        while True:
            for i, value in enumerate(found):
                if value is None:
                    found[i] = self.first(i, key, after, test)
            if all(v is not None for v in found) or time.monotonic() > deadline:
                return found
            await asyncio.sleep(POLL_S)


class Reporters:
    """servefleet's own load reporter (the one proxies run), one per watcher up to
    `count`: it reports to its watcher's leader, names the replica sets its
    watcher applied (so drains wait for it, drain_fence.py), and has one
    request in flight on each of three deployments, so it reports every period."""

    def __init__(self, watchers: Watchers, count: int, deployments: list[str],
                 period_s: float) -> None:
        self.deployments = deployments or ["app/d0"]
        self.reporters = [
            LoadReporter(client, period_s, engine=self._load(i), applied=self._applied(client))
            for i, client in enumerate(watchers.clients[:count])]
        self.sent = 0
        self.tasks: list[asyncio.Task[None]] = []
        # Requests in flight each reporter adds, by deployment ("load" command).
        self.extra: dict[str, tuple[int, int]] = {}

    def _load(self, index: int):
        mine = {self.deployments[(index + k) % len(self.deployments)]: (0, 1) for k in range(3)}

        async def load() -> EngineLoad:
            self.sent += 1
            return EngineLoad(counts={**mine, **self.extra})
        return load

    @staticmethod
    def _applied(client: WatchClient):
        def applied() -> dict[str, str]:
            return {key.removeprefix("replicas/"): snapshot.snapshot_id
                    for key, snapshot in client.snapshots.items()
                    if key.startswith("replicas/")}
        return applied

    def start(self) -> None:
        no_pools = SimpleNamespace(pools={})  # the load comes from `engine`
        self.tasks = [asyncio.create_task(r.run(no_pools)) for r in self.reporters]  # type: ignore[arg-type]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


def test_of(command: dict[str, Any]):
    if "has" in command:
        return lambda ids: command["has"] in ids
    if "lacks" in command:
        return lambda ids: command["lacks"] not in ids
    if "count" in command:
        return lambda ids: len(ids) == int(command["count"])
    if "more_than" in command:
        return lambda ids: len(ids) > int(command["more_than"])
    raise ValueError("seen: one of has, lacks, count or more_than is needed")


async def answer(command: dict[str, Any], watchers: Watchers, reporters: Reporters,
                 replicas: ReplicaWatchers | None) -> Any:
    op = command.get("op")
    timeout = float(command.get("timeout", 60))
    if op == "ready":
        found = await watchers.wait_seen("routes", 0.0, lambda ids: True, timeout)
        return sum(v is not None for v in found)
    if op == "replicas ready":
        return await replicas.connected(timeout) if replicas is not None else 0
    if op == "seen":
        return await watchers.wait_seen(str(command["key"]), float(command["after"]),
                                        test_of(command), timeout)
    if op == "load":
        reporters.extra[str(command["deployment"])] = (0, int(command["ongoing"]))
        return len(reporters.reporters)
    if op == "stats":
        return {"snapshots": watchers.snapshots, "reports": reporters.sent}
    raise ValueError(f"unknown op {op!r}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--controllers", required=True)
    parser.add_argument("--watchers", type=int, default=10)
    parser.add_argument("--reporters", type=int, default=10, help="at most --watchers")
    parser.add_argument("--report-interval-s", type=float, default=1.0)
    parser.add_argument("--deployments", default="", help="app/deployment,... to report on")
    parser.add_argument("--name", default="load")
    parser.add_argument("--sim-socket", default="",
                        help="the sim host's admin socket: hold its replicas' Watch streams")
    parser.add_argument("--replica-share", default="0/1", metavar="I/N",
                        help="of those, the replicas whose id hashes to I modulo N")
    args = parser.parse_args()
    controllers = args.controllers.split(",")
    share, _, shares = args.replica_share.partition("/")
    replicas = ReplicaWatchers(controllers, args.sim_socket, int(share), int(shares)
                               ) if args.sim_socket else None
    watchers = Watchers(controllers, args.watchers, args.name)
    reporters = Reporters(watchers, args.reporters,
                          [d for d in args.deployments.split(",") if d], args.report_interval_s)
    watchers.start()
    reporters.start()
    if replicas is not None:
        replicas.start()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while line := await reader.readline():
            command = json.loads(line)
            if command.get("op") == "quit":
                break
            try:
                reply = {"ok": await answer(command, watchers, reporters, replicas)}
            except (ValueError, KeyError, TypeError) as e:
                reply = {"error": str(e)}
            print(json.dumps(reply), flush=True)
    finally:
        await reporters.close()
        await watchers.close()
        if replicas is not None:
            await replicas.close()


if __name__ == "__main__":
    asyncio.run(main())
