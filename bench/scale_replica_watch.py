"""The Watch streams of simulated replicas, for bench/scale_load.py.

A real replica holds one Watch stream to the leader for its deployment's
config and the route table (replica/main.py), kind REPLICA, with its replica
id as watcher id, from its start to its exit. A simulated replica has no
process to hold it, so the load generator does: it asks the sim host for
its replicas every second and opens or closes streams to match, for the
share of replicas given to this process (by a hash of the id).
"""

from __future__ import annotations

import asyncio
import json
import zlib
from typing import Any

from servefleet._private.security.tls import PLAIN
from servefleet._private.watch_client import WatchClient
from servefleet._private.wire import ROUTES_KEY, config_key
from servefleet.v1 import watch_pb2

SYNC_S = 1.0


class ReplicaWatchers:
    def __init__(self, controllers: list[str], sim_socket: str, share: int, shares: int) -> None:
        self._controllers = controllers
        self._socket = sim_socket
        self._share, self._shares = share, shares
        self.clients: dict[str, WatchClient] = {}
        self.synced = asyncio.Event()  # the first sync is done
        self._task: asyncio.Task[None] | None = None
        self._version = -1

    def _mine(self, replica_id: str) -> bool:
        return zlib.crc32(replica_id.encode()) % self._shares == self._share

    async def _ask(self, op: str) -> Any:
        reader, writer = await asyncio.open_unix_connection(self._socket, limit=1 << 26)
        try:
            writer.write(json.dumps({"op": op}).encode() + b"\n")
            await writer.drain()
            answer = json.loads(await reader.readline())
        finally:
            writer.close()
        if "error" in answer:
            raise RuntimeError(f"sim host: {answer['error']}")
        return answer["ok"]

    async def _sync(self) -> None:
        version = await self._ask("version")
        if version == self._version:
            return  # no replica started or exited: listing them all again is the cost
        self._version = version
        live = {r["replica_id"]: r for r in await self._ask("replicas")
                if self._mine(r["replica_id"])}
        for replica_id in set(self.clients) - set(live):
            await self.clients.pop(replica_id).close()
        for replica_id in set(live) - set(self.clients):
            replica = live[replica_id]
            client = WatchClient(
                self._controllers,
                [config_key(replica["application"], replica["deployment"]), ROUTES_KEY],
                kind=watch_pb2.WATCHER_KIND_REPLICA, address=replica["http_address"],
                watcher_id=replica_id, credentials=PLAIN)
            client.start()
            self.clients[replica_id] = client

    async def _run(self) -> None:
        while True:
            await self._sync()
            self.synced.set()
            await asyncio.sleep(SYNC_S)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def connected(self, timeout: float) -> int:
        """How many streams have had their first answer, waiting up to `timeout`
        for all of them (after the first sync)."""
        await asyncio.wait_for(self.synced.wait(), timeout)
        clients = list(self.clients.values())
        waits = [asyncio.create_task(c.connected.wait()) for c in clients]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=timeout)
            for wait in pending:
                wait.cancel()
        return sum(c.connected.is_set() for c in clients)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*(c.close() for c in self.clients.values()))
