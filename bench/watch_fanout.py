"""Watch fan-out: how fast one change reaches many open Watch streams.

    .venv/bin/python bench/watch_fanout.py [--streams 1000[,5000...]] [--updates 10]
                                           [--clients go|python] [--floor-servers 1]

One controller (sqlite store, no runtime) serves N concurrent Watch streams
of the route table. Each update is a Deploy adding a route; the figure is,
per stream, the time from sending that Deploy to the stream receiving the new
route table (goal: p99 <= 50 ms at 1,000 streams). Baselines, same run: a
single stream; and the floor of gRPC itself, the same clients on a bare
grpc.aio server whose Watch writes one prebuilt message per change to every
stream and whose Deploy only adds a route (no store, no leader, no checks).
With --floor-servers K the floor's streams are split between K bare servers,
each a process of its own.

The streams are held by one Go process (bench/watchers, built on first use
with Debian's Go packages). In a cluster each watcher is a proxy on a host of
its own; here they share the server's two cores, and Python clients
(`--clients python`, two processes) took so much of them that they made up
about a third of the figure (docs/watch-streams.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import queue
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import grpc
from figures import Figure, emit

from servefleet._private.testing import ControllerProcess, free_port
from servefleet._private.wire import ROUTES_KEY
from servefleet.client import ControllerClient
from servefleet.controller.server import MAX_PENDING_CALLS
from servefleet.v1 import controller_pb2, controller_pb2_grpc, watch_pb2
from servefleet.v1 import deployment_pb2 as d

ROOT = Path(__file__).resolve().parent.parent
STREAMS_PER_CHANNEL = 100
OPEN_TIMEOUT_S = 300
WATCH = "/servefleet.v1.ControllerService/Watch"
SNAPSHOT_TAG = b"\x0a"  # field 1 (snapshot), length-delimited


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _watchers(address: str, count: int, ready, results, updates: int) -> None:
    """Open `count` streams; report (update number, receive time) per stream.

    Lean on purpose, since these clients share the machine's cores with the
    controller they measure: messages arrive as bytes and are only stamped
    (a snapshot is told from a heartbeat by its first byte, the tag of
    WatchResponse.snapshot); they are parsed after the measurement."""
    # A subchannel pool per channel: otherwise channels to one address share
    # one connection (the Go clients also open one per 100 streams).
    channels = [grpc.aio.insecure_channel(address,
                                          options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(max(1, count // STREAMS_PER_CHANNEL))]
    stamped: list[tuple[bytes, float]] = []
    opened = 0

    async def watch(channel) -> None:
        nonlocal opened
        call = channel.unary_stream(WATCH, request_serializer=watch_pb2.WatchRequest.
                                    SerializeToString, response_deserializer=None)(
            watch_pb2.WatchRequest(known={ROUTES_KEY: ""}, heartbeat_s=30))
        first = True
        async for raw in call:
            if raw[:1] != SNAPSHOT_TAG:
                continue  # a heartbeat
            if first:
                first = False
                opened += 1
            else:
                stamped.append((raw, time.time()))
            if b"/r%d" % updates in raw:  # the last update's route: done
                return

    tasks = [asyncio.create_task(watch(channels[i % len(channels)])) for i in range(count)]
    while opened < count:
        await asyncio.sleep(0.05)
    ready.set()
    await asyncio.gather(*tasks)
    received = [(len(watch_pb2.WatchResponse.FromString(raw).snapshot.routes.routes), at)
                for raw, at in stamped]
    results.put(received)
    for channel in channels:
        await channel.close()


class _Bare(controller_pb2_grpc.ControllerServiceServicer):
    """The least a Watch server can do per change: one prebuilt message per stream."""

    def __init__(self) -> None:
        self.routes = watch_pb2.RouteTable()
        self.version = 0
        self.response = self._response()
        self.changed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def _response(self) -> watch_pb2.WatchResponse:
        return watch_pb2.WatchResponse(snapshot=watch_pb2.Snapshot(
            key=ROUTES_KEY, snapshot_id=str(self.version), routes=self.routes))

    async def Deploy(self, request, context):
        self.routes.routes.add(route_prefix=request.spec.route_prefix,
                               deployment=request.spec.name)
        self.version += 1
        self.response = self._response()
        changed, self.changed = self.changed, asyncio.get_running_loop().create_future()
        changed.set_result(None)
        return controller_pb2.DeployResponse()

    async def DeleteDeployments(self, request, context):
        return controller_pb2.DeleteDeploymentsResponse()

    async def Watch(self, request, context):
        seen = -1
        while True:
            if seen != self.version:
                seen = self.version
                yield self.response
            await self.changed


def _serve_bare(port: int) -> None:
    async def main() -> None:
        # With the controller's limit on calls waiting for the application.
        server = grpc.aio.server(options=[
            ("grpc.server.max_pending_requests", MAX_PENDING_CALLS),
            ("grpc.server.max_pending_requests_hard_limit", MAX_PENDING_CALLS)])
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(_Bare(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()
    asyncio.run(main())


def grpc_floor(streams: int, updates: int, clients: str, processes: int,
               servers: int = 1) -> list[float]:
    """measure() against `servers` bare servers (processes of their own, killed
    after), the streams split between them."""
    ports = [free_port() for _ in range(servers)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_serve_bare, args=(port,)) for port in ports]
    for proc in procs:
        proc.start()
    try:
        deadline = time.monotonic() + 30
        for port in ports:
            while True:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError("a bare gRPC server did not listen")
                time.sleep(0.05)
        return measure([f"127.0.0.1:{port}" for port in ports], streams, updates, clients,
                       processes)
    finally:
        for proc in procs:
            proc.kill()
            proc.join()


def _watcher_process(address: str, count: int, ready, results, updates: int) -> None:
    asyncio.run(_watchers(address, count, ready, results, updates))


class PythonClients:
    """`processes` Python processes holding the streams between them (grpc.aio)."""

    def __init__(self, address: str, streams: int, updates: int, processes: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._results = ctx.Queue()
        share = [n for n in (streams // processes + (i < streams % processes)
                             for i in range(processes)) if n]
        self._readies = [ctx.Event() for _ in share]
        self._procs = [ctx.Process(target=_watcher_process,
                                   args=(address, n, ready, self._results, updates))
                       for n, ready in zip(share, self._readies, strict=True)]
        for proc in self._procs:
            proc.start()

    def wait_ready(self, deadline: float) -> bool:
        return all(ready.wait(max(1.0, deadline - time.monotonic())) for ready in self._readies)

    def arrivals(self) -> list[tuple[int, float]]:
        received = [a for _ in self._procs for a in self._results.get(timeout=120)]
        for proc in self._procs:
            proc.join(30)
        return received

    def close(self) -> None:
        for proc in self._procs:
            proc.kill()
            proc.join()


def build_go_watchers() -> Path:
    """Build bench/watchers (a package of the repository's Go module) once."""
    binary = ROOT / ".build" / "watchers"
    source = ROOT / "bench" / "watchers" / "main.go"
    if binary.exists() and binary.stat().st_mtime > source.stat().st_mtime:
        return binary
    subprocess.run(["go", "build", "-o", str(binary), "./bench/watchers"], cwd=ROOT,
                   check=True, timeout=300)
    return binary


class GoClients:
    """One Go process (bench/watchers) holding every stream."""

    def __init__(self, address: str, streams: int, updates: int) -> None:
        self._proc = subprocess.Popen(
            [str(build_go_watchers()), "-address", address, "-streams", str(streams),
             "-per-conn", str(STREAMS_PER_CHANNEL), "-updates", str(updates)],
            stdout=subprocess.PIPE, text=True)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put("")

    def wait_ready(self, deadline: float) -> bool:
        try:
            return self._lines.get(timeout=max(1.0, deadline - time.monotonic())) == "ready\n"
        except queue.Empty:
            return False

    def arrivals(self) -> list[tuple[int, float]]:
        line = self._lines.get(timeout=120)
        if not line:
            raise RuntimeError(f"bench/watchers exited {self._proc.wait()} without results")
        return [(int(count), at) for count, at in json.loads(line)]

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()


def measure(addresses: list[str], streams: int, updates: int, clients: str,
            processes: int) -> list[float]:
    """Per-stream latencies; the streams are split between `addresses`, and each
    update is sent to every one of them in turn (timed from the first)."""
    if clients == "python" and len(addresses) > 1:
        raise ValueError("Python clients watch one server")
    began = time.monotonic()
    watchers: list[GoClients | PythonClients] = []
    try:
        for i, address in enumerate(addresses):
            share = streams // len(addresses) + (i < streams % len(addresses))
            watchers.append(GoClients(address, share, updates) if clients == "go"
                            else PythonClients(address, share, updates, processes))
        for watcher in watchers:
            if not watcher.wait_ready(began + OPEN_TIMEOUT_S):
                raise TimeoutError(f"{streams} streams did not open within {OPEN_TIMEOUT_S} s")
        print(f"  {streams} streams open after {time.monotonic() - began:.1f} s", flush=True)
        sent: dict[int, float] = {}
        with contextlib.ExitStack() as stack:
            controllers = [stack.enter_context(ControllerClient(a)) for a in addresses]
            for n in range(1, updates + 1):
                sent[n] = time.time()
                for client in controllers:
                    client.deploy(d.DeploymentSpec(name=f"r{n}", import_path="m:C",
                                                   route_prefix=f"/r{n}"))
                time.sleep(0.3)
            latencies = [at - sent[count] for watcher in watchers
                         for count, at in watcher.arrivals()]
            for client in controllers:
                client.delete([f"r{n}" for n in range(1, updates + 1)])
    finally:
        for watcher in watchers:
            watcher.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="1000", help="stream counts, comma-separated")
    parser.add_argument("--updates", type=int, default=10)
    parser.add_argument("--clients", choices=("go", "python"), default="go",
                        help="what holds the streams: one Go process (bench/watchers), or "
                             "--client-processes Python processes")
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--floor-servers", type=int, default=1,
                        help="bare servers sharing the floor's streams (Go clients)")
    args = parser.parse_args()
    state = tempfile.mkdtemp(prefix="servefleet-fanout-")
    controller = ControllerProcess(f"sqlite://{state}/state.db", runtime="none").start()
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        baseline = measure([controller.address], 1, args.updates, args.clients, 1)
        fanouts = {count: measure([controller.address], count, args.updates, args.clients,
                                  args.client_processes)
                   for count in (int(c) for c in args.streams.split(","))}
    finally:
        controller.stop()
        shutil.rmtree(state, ignore_errors=True)
    floor_at = 1000 if 1000 in fanouts else max(fanouts)
    floor = grpc_floor(floor_at, args.updates, args.clients, args.client_processes,
                       args.floor_servers)
    print(f"servefleet Watch fan-out: {args.updates} route-table updates "
          f"(goal p99 <= 50 ms at 1,000 streams)")
    print(f"  {'':<52}{'p50':>12}{'p99':>12}{'max':>12}")
    figures: dict[str, Figure] = {}
    for count, samples in [*fanouts.items(), (1, baseline)]:
        label = f"{count} streams" if count > 1 else "baseline: 1 stream"
        print(f"  {label:<52}{statistics.median(samples) * 1e3:>9.1f} ms"
              f"{percentile(samples, 0.99) * 1e3:>9.1f} ms{max(samples) * 1e3:>9.1f} ms")
        name = f"{count} stream{'s' if count > 1 else ''}"
        figures[f"{name}: p50"] = Figure([statistics.median(samples) * 1e3], "ms",
                                         headline=count in (1, 1000, 5000))
        figures[f"{name}: p99"] = Figure([percentile(samples, 0.99) * 1e3], "ms",
                                         goal="<= 50" if count == 1000 else "",
                                         headline=count in (1, 1000, 5000))
    label = f"floor: bare grpc.aio, {floor_at} streams"
    if args.floor_servers > 1:
        label += f" on {args.floor_servers} servers"
    print(f"  {label:<52}{statistics.median(floor) * 1e3:>9.1f} ms"
          f"{percentile(floor, 0.99) * 1e3:>9.1f} ms{max(floor) * 1e3:>9.1f} ms")
    figures[f"{label}: p50"] = Figure([statistics.median(floor) * 1e3], "ms", headline=False)
    figures[f"{label}: p99"] = Figure([percentile(floor, 0.99) * 1e3], "ms")
    emit(figures)


if __name__ == "__main__":
    main()
