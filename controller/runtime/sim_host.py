"""The sim host: one process holding every simulated replica of a sim cluster.

    python -m servefleet.controller.runtime.sim_host --socket PATH [--ready-delay-s S]

Simulated replicas are records, not processes (as kubemark and kwok do for
Kubernetes). Each answers the ReplicaService on an address of its own
(sim_grpc.py), as a real replica does: LOADING until its ready delay has
passed, then READY; CheckHealth, Reconfigure and Drain with the real
replica's checks (a call naming another replica id is refused with
FAILED_PRECONDITION). On command a replica fails its start (FAILED, then
exits), exits, hangs (answers nothing) or fails its health checks.

Two callers use the admin socket (a Unix socket, one JSON object per line,
answered in order): the controller's sim runtime (runtime/sim.py: start,
stop, list, inspect) and the benchmark (set, act, replicas, version, stats). The
host holds the replicas across controller failovers, so a new leader lists
and adopts them as it adopts processes. Bad requests are answered with
{"error": "..."} naming the problem.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections import Counter, OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

from servefleet.v1 import replica_pb2 as rpb

from .sim_grpc import (
    FAILED_PRECONDITION,
    UNAVAILABLE,
    UNIMPLEMENTED,
    UNKNOWN,
    CallError,
    LoopbackGrpcServer,
)

logger = logging.getLogger(__name__)
PHASE = rpb.ReplicaPhase
SERVICE = "/servefleet.v1.ReplicaService/"
# Replica n gets 127.64.0.0 + n: 2^22 addresses, none reused while the host runs
# (a channel the controller keeps to a gone replica never reaches a new one).
FIRST_ADDRESS = (127 << 24) | (64 << 16)
ADDRESSES = 1 << 22
# Gone replicas remembered for inspect (their exit code), oldest dropped first.
REMEMBER_GONE = 200_000
ACTIONS = ("exit", "fail", "hang", "unhealthy", "healthy")


@dataclass
class SimReplica:
    replica_id: str
    cluster: str
    application: str
    deployment: str
    version: str
    address: str
    user_config_json: str = ""
    max_ongoing_requests: int = 0
    created: float = 0.0
    ready_at: float = 0.0
    failed: str = ""        # an error: FAILED, then exits
    hung: bool = False      # answers no call
    unhealthy: bool = False
    draining: bool = False
    alive: bool = True
    exit_code: int | None = None

    def phase(self, now: float) -> rpb.ReplicaPhase:
        if self.failed:
            return PHASE.REPLICA_PHASE_FAILED
        if self.draining:
            return PHASE.REPLICA_PHASE_DRAINING
        return PHASE.REPLICA_PHASE_READY if now >= self.ready_at else PHASE.REPLICA_PHASE_LOADING

    def seen(self) -> dict[str, Any]:
        """What the runtime reports of it (base.RuntimeReplica's fields)."""
        return {"replica_id": self.replica_id, "cluster": self.cluster,
                "application": self.application, "deployment": self.deployment,
                "version": self.version, "handle": self.replica_id,
                "control_address": self.address, "http_address": self.address,
                "alive": self.alive, "exit_code": self.exit_code}


@dataclass
class Settings:
    # Seconds from start to READY.
    ready_delay_s: float = 0.5
    # Seconds a drained replica takes to exit.
    drain_s: float = 0.05
    # Starts that fail (FAILED, then exit): the next this many.
    fail_next_starts: int = 0


@dataclass
class SimHost:
    settings: Settings = field(default_factory=Settings)
    port: int = 0
    live: dict[str, SimReplica] = field(default_factory=dict)
    by_address: dict[str, SimReplica] = field(default_factory=dict)  # by IP
    gone: OrderedDict[str, SimReplica] = field(default_factory=OrderedDict)
    calls: Counter[str] = field(default_factory=Counter)
    # Bumped when a replica starts or exits: a poller lists again only then.
    version: int = 0
    _next: int = 1
    _server: LoopbackGrpcServer | None = None

    # -- the replicas' ReplicaService ------------------------------------------------

    async def serve(self, local: str, path: str, body: bytes) -> bytes:
        method = path.removeprefix(SERVICE)
        self.calls[method] += 1
        replica = self.by_address.get(local)
        if replica is None or not replica.alive:
            raise CallError(UNAVAILABLE, f"connection refused ({local}: no replica)")
        if replica.hung:
            await asyncio.Event().wait()  # until the caller's deadline resets the stream
        if method == "GetMetadata":
            return self._metadata(replica).SerializeToString()
        requests: dict[str, Any] = {"CheckHealth": rpb.CheckHealthRequest,
                                    "Reconfigure": rpb.ReconfigureRequest,
                                    "Drain": rpb.DrainRequest}
        if method not in requests:
            raise CallError(UNIMPLEMENTED, f"unknown method {path}")
        request = requests[method].FromString(body)
        if request.replica_id and request.replica_id != replica.replica_id:
            raise CallError(FAILED_PRECONDITION,
                            f"this is replica {replica.replica_id}, not {request.replica_id}")
        phase = replica.phase(time.time())
        if method == "CheckHealth":
            if phase != PHASE.REPLICA_PHASE_READY:
                raise CallError(UNAVAILABLE, f"replica is {PHASE.Name(phase)[14:]}")
            if replica.unhealthy:
                raise CallError(UNKNOWN, "check_health raised RuntimeError: sim: unhealthy")
            return rpb.CheckHealthResponse().SerializeToString()
        if method == "Reconfigure":
            if phase != PHASE.REPLICA_PHASE_READY:
                raise CallError(FAILED_PRECONDITION, "replica is not ready")
            replica.user_config_json = request.user_config_json
            replica.max_ongoing_requests = request.max_ongoing_requests
            return rpb.ReconfigureResponse().SerializeToString()
        replica.draining = True
        asyncio.get_running_loop().call_later(self.settings.drain_s, self._exit, replica, 0)
        return rpb.DrainResponse().SerializeToString()

    def _metadata(self, replica: SimReplica) -> rpb.GetMetadataResponse:
        return rpb.GetMetadataResponse(
            phase=replica.phase(time.time()), replica_id=replica.replica_id,
            version=replica.version, pid=os.getpid(),
            user_config_json=replica.user_config_json,
            max_ongoing_requests=replica.max_ongoing_requests,
            error=replica.failed, traceback=replica.failed and "sim: failed on command")

    def _exit(self, replica: SimReplica, code: int) -> None:
        if not replica.alive:
            return
        replica.alive, replica.exit_code = False, code
        self.version += 1
        self.live.pop(replica.replica_id, None)
        self.by_address.pop(replica.address.rpartition(":")[0], None)
        self.gone[replica.replica_id] = replica
        while len(self.gone) > REMEMBER_GONE:
            self.gone.popitem(last=False)

    # -- the runtime's requests -------------------------------------------------------

    def start(self, launch: dict[str, Any]) -> dict[str, Any]:
        replica_id = str(launch.get("replica_id") or "")
        if not replica_id:
            raise ValueError("start: launch.replica_id is missing")
        if replica_id in self.live:
            raise ValueError(f"start: replica {replica_id} runs already")
        if self._next >= ADDRESSES:
            raise ValueError("start: the sim host has used all its addresses; restart it")
        n, self._next = FIRST_ADDRESS + self._next, self._next + 1
        ip = f"{n >> 24}.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"
        address = f"{ip}:{self.port}"
        now = time.time()
        replica = SimReplica(
            replica_id=replica_id, cluster=str(launch.get("cluster", "")),
            application=str(launch.get("application", "")),
            deployment=str(launch.get("deployment", "")), version=str(launch.get("version", "")),
            address=address, user_config_json=str(launch.get("user_config_json", "")),
            max_ongoing_requests=int(launch.get("max_ongoing_requests", 0)),
            created=now, ready_at=now + self.settings.ready_delay_s)
        if self.settings.fail_next_starts > 0:
            self.settings.fail_next_starts -= 1
            self._act(replica, "fail")
        self.live[replica_id] = replica
        self.by_address[ip] = replica
        self.version += 1
        return replica.seen()

    def stop(self, handle: str) -> dict[str, Any]:
        replica = self.live.get(handle)
        if replica is not None:
            self._exit(replica, 0 if replica.draining else -signal.SIGTERM)
        return {}

    def inspect(self, handle: str) -> dict[str, Any] | None:
        replica = self.live.get(handle) or self.gone.get(handle)
        return replica.seen() if replica is not None else None

    # -- the benchmark's commands --------------------------------------------------

    def _act(self, replica: SimReplica, action: str) -> None:
        if action == "exit":
            self._exit(replica, 1)
        elif action == "fail":
            replica.failed = "RuntimeError: sim: start failed on command"
            asyncio.get_running_loop().call_later(1.0, self._exit, replica, 1)
        elif action == "hang":
            replica.hung = True
        else:
            replica.unhealthy = action == "unhealthy"

    def act(self, action: str, replica_ids: list[str]) -> dict[str, Any]:
        if action not in ACTIONS:
            raise ValueError(f"act: action {action!r}: one of {', '.join(ACTIONS)}")
        unknown = [r for r in replica_ids if r not in self.live]
        if unknown:
            raise ValueError(f"act: no live replica {', '.join(unknown[:5])}")
        at = time.time()
        for replica_id in replica_ids:
            self._act(self.live[replica_id], action)
        return {"at": at}

    def set(self, values: dict[str, Any]) -> dict[str, Any]:
        known = asdict(self.settings)
        for name, value in values.items():
            if name not in known:
                raise ValueError(f"set: unknown setting {name!r}: one of {', '.join(known)}")
            setattr(self.settings, name, type(known[name])(value))
        return asdict(self.settings)

    def handle(self, request: dict[str, Any]) -> Any:
        op = request.get("op")
        if op == "start":
            return self.start(request.get("launch") or {})
        if op == "stop":
            return self.stop(str(request.get("handle", "")))
        if op == "list":
            cluster = request.get("cluster")
            return [r.seen() for r in self.live.values() if r.cluster == cluster]
        if op == "inspect":
            return self.inspect(str(request.get("handle", "")))
        if op == "set":
            return self.set(request.get("values") or {})
        if op == "act":
            return self.act(str(request.get("action")), list(request.get("replica_ids") or []))
        if op == "replicas":
            return [{**r.seen(), "ready_at": r.ready_at, "created": r.created}
                    for r in self.live.values()]
        if op == "version":
            return self.version
        if op == "stats":
            connections = len(self._server.connections) if self._server else 0
            return {"live": len(self.live), "connections": connections,
                    "calls": dict(self.calls)}
        raise ValueError(f"unknown op {op!r}")

    async def _admin(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                try:
                    answer = {"ok": self.handle(json.loads(line))}
                except (ValueError, TypeError, AttributeError) as e:
                    answer = {"error": str(e)}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        writer.close()

    async def run(self, socket_path: str, port: int = 0) -> None:
        self._server = LoopbackGrpcServer(self.serve, port)
        await self._server.start()
        self.port = self._server.port
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        admin = await asyncio.start_unix_server(self._admin, socket_path, limit=1 << 24)
        os.chmod(socket_path, 0o600)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        print(f"sim host ready: admin {socket_path}, replicas on port {self.port}", flush=True)
        await stop.wait()
        admin.close()
        await self._server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", required=True, help="the admin socket's path")
    parser.add_argument("--port", type=int, default=0,
                        help="the replicas' control port on every loopback address (0: free)")
    parser.add_argument("--ready-delay-s", type=float, default=0.5,
                        help="seconds from a replica's start to READY (default 0.5)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    host = SimHost(Settings(ready_delay_s=args.ready_delay_s))
    try:
        import uvloop
        uvloop.run(host.run(args.socket, args.port))
    except ImportError:
        asyncio.run(host.run(args.socket, args.port))


if __name__ == "__main__":
    main()
