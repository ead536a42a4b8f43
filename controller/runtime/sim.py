"""The sim runtime: replicas simulated by a sim host process (sim_host.py).

`servefleet controller --runtime sim --runtime-dir DIR` starts, stops,
lists and inspects replicas by asking the sim host listening on
DIR/sim-host.sock; the controller then probes, health-checks, reconfigures
and drains them over gRPC at their control addresses, as it does real
replicas. For measuring the control plane at scale (bench/scale.py,
docs/scale.md): no user code runs, replicas serve no requests and print
nothing.

The host, not this object, holds the replicas, so a new leader (another
controller with the same runtime dir) lists and adopts them. Without a
host every call raises OSError naming the socket and how to start one.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from pathlib import Path
from typing import Any

from .base import ReplicaLaunch, RuntimeReplica

SOCKET_NAME = "sim-host.sock"


def socket_path(runtime_dir: str | Path) -> Path:
    return Path(runtime_dir).expanduser().resolve() / SOCKET_NAME


class SimRuntime:
    name = "sim"

    def __init__(self, runtime_dir: str | Path) -> None:
        self._socket = socket_path(runtime_dir)
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._lock: asyncio.Lock | None = None

    async def _ask(self, request: dict[str, Any]) -> Any:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._streams is None:
                try:
                    self._streams = await asyncio.open_unix_connection(
                        str(self._socket), limit=1 << 26)
                except OSError as e:
                    raise OSError(f"no sim host at {self._socket} ({e.strerror or e}): start "
                                  "python -m servefleet.controller.runtime.sim_host --socket "
                                  f"{self._socket}") from None
            reader, writer = self._streams
            try:
                writer.write(json.dumps(request).encode() + b"\n")
                await writer.drain()
                line = await reader.readline()
            except (OSError, asyncio.IncompleteReadError):
                line = b""
            except BaseException:
                # Cancelled between the request and its answer: the answer
                # would be read as the next request's, so the connection goes.
                writer.close()
                self._streams = None
                raise
            if not line:
                writer.close()
                self._streams = None
                raise OSError(f"the sim host at {self._socket} went away")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"sim host: {answer['error']}")
        return answer["ok"]

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        seen = await self._ask({"op": "start", "launch": {
            "cluster": launch.cluster, "application": launch.application,
            "deployment": launch.deployment, "replica_id": launch.replica_id,
            "version": launch.version,
            "user_config_json": launch.settings.get("user_config_json", ""),
            "max_ongoing_requests": launch.settings.get("max_ongoing_requests", 0)}})
        return RuntimeReplica(**seen)

    async def stop(self, handle: str, timeout_s: float) -> None:
        if handle:
            await self._ask({"op": "stop", "handle": handle})

    async def list(self, cluster: str) -> builtins.list[RuntimeReplica]:
        return [RuntimeReplica(**seen) for seen in await self._ask({"op": "list",
                                                                     "cluster": cluster})]

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        seen = await self._ask({"op": "inspect", "handle": handle}) if handle else None
        return RuntimeReplica(**seen) if seen else None

    def logs(self, replica_id: str, lines: int = 20) -> str:
        return ""  # simulated replicas print nothing

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        return "", cursor

    def cleanup(self, replica_id: str) -> None:
        pass  # the host forgets a stopped replica itself

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        return []

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None
