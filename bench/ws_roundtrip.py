"""WebSocket figures: round trips through the proxy beside the replica alone,
and the proxy's memory per open WebSocket.

    .venv/bin/python bench/ws_roundtrip.py [--messages 2000] [--rounds 3] [--open 1000]

Starts a controller (sqlite), one replica of tests/apps/ws_app.py (a
Starlette ingress) and `servefleet proxy`, all on 127.0.0.1, then:

1. Round trips: one client sends a small text message to /echo and waits
   for it to come back, `--messages` times, through the proxy and straight
   to the replica's own port, alternately for `--rounds` rounds; the median
   and min-max of p50 and p99 over the rounds.
2. Memory: the proxy's resident set (RSS) idle, then with `--open`
   WebSockets open through it to /hold (each answered once); the difference
   per WebSocket, and the replica's beside it.

Everything it started is stopped, also when it fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

import psutil
from figures import Figure, emit
from websockets.asyncio.client import ClientConnection, connect

from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

APPS = str(Path(__file__).resolve().parent.parent / "tests" / "apps")


def spread(values: list[float], digits: int = 2) -> str:
    return (f"{statistics.median(values):,.{digits}f} "
            f"[{min(values):,.{digits}f}-{max(values):,.{digits}f}]")


async def round_trips(url: str, count: int) -> tuple[float, float]:
    """(p50, p99) in ms of `count` echo round trips on one WebSocket."""
    async with connect(url, compression=None) as ws:
        for _ in range(50):  # warm up
            await ws.send("x")
            await ws.recv()
        taken = []
        for _ in range(count):
            start = time.perf_counter()
            await ws.send("ping")
            await ws.recv()
            taken.append(time.perf_counter() - start)
    taken.sort()
    return taken[len(taken) // 2] * 1e3, taken[int(len(taken) * 0.99)] * 1e3


async def hold_open(url: str, count: int) -> list[ClientConnection]:
    opened: list[ClientConnection] = []
    for start in range(0, count, 100):
        batch = await asyncio.gather(*[connect(url, compression=None)
                                       for _ in range(min(100, count - start))])
        await asyncio.gather(*[ws.recv() for ws in batch])  # the replica's pid: it is open
        opened.extend(batch)
    return opened


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--open", type=int, default=1000)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # 3 sockets per WebSocket
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.open + 1024)), hard))
    work = tempfile.mkdtemp(prefix="servefleet-ws-bench-")
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work,
                                   extra_args=["--allow-working-dir", APPS]).start()
    proxy = None
    try:
        wait_for(controller.is_leader, 30, "the controller to lead")
        with ControllerClient(controller.address) as client:
            client.deploy(d.DeploymentSpec(
                name="Ws", import_path="ws_app:WsApp", route_prefix="/ws",
                runtime=d.RuntimeOptions(working_dir=APPS),
                replica_config=d.ReplicaConfig(num_replicas=1,
                                               max_ongoing_requests=args.open + 100)))
            wait_for(lambda: [r for r in client.replicas()
                              if r.state == replica_pb2.REPLICA_STATE_RUNNING], 60,
                     "the replica RUNNING")
            (replica,) = client.replicas()
            proxy = ProxyProcess([controller.address], log_dir=work).start()
            through = proxy.url.replace("http://", "ws://") + "/ws"
            direct = f"ws://{replica.record.http_address}"
            replica_pid = int(replica.record.handle.split(":")[0])
            run(args, through, direct, proxy, replica_pid)
            client.shutdown()
    finally:
        if proxy is not None:
            proxy.stop()
        controller.stop()


def run(args: argparse.Namespace, through: str, direct: str, proxy: ProxyProcess,
        replica_pid: int) -> None:
    print(f"servefleet WebSockets: {args.messages} echo round trips per round, "
          f"{args.rounds} rounds (median [min-max]); {args.open} open for memory")
    wait_for(lambda: asyncio.run(_answers(through + "/echo")), 30, "the route at the proxy")
    results: dict[str, list[tuple[float, float]]] = {"proxy": [], "replica alone": []}
    for _ in range(args.rounds):
        results["proxy"].append(asyncio.run(round_trips(through + "/echo", args.messages)))
        results["replica alone"].append(asyncio.run(round_trips(direct + "/echo",
                                                                args.messages)))
    print(f"  {'round trip of a small message':<34}{'p50 ms':>22}{'p99 ms':>22}")
    for label, rows in results.items():
        print(f"  {label:<34}{spread([r[0] for r in rows]):>22}{spread([r[1] for r in rows]):>22}")

    assert proxy.proc is not None
    idle_proxy, idle_replica = rss_mb(proxy.proc.pid), rss_mb(replica_pid)

    async def hold() -> tuple[float, float]:
        opened = await hold_open(through + "/hold", args.open)
        await asyncio.sleep(1)
        assert proxy.proc is not None
        sizes = rss_mb(proxy.proc.pid), rss_mb(replica_pid)
        for ws in opened:
            with contextlib.suppress(Exception):
                await ws.close()
        return sizes
    held_proxy, held_replica = asyncio.run(hold())
    print(f"  {'memory (RSS)':<34}{'idle MB':>14}{f'{args.open} open MB':>14}"
          f"{'per WebSocket KB':>18}")
    for label, idle, held in (("proxy", idle_proxy, held_proxy),
                              ("replica (for comparison)", idle_replica, held_replica)):
        print(f"  {label:<34}{idle:>14.1f}{held:>14.1f}"
              f"{(held - idle) * 1024 / args.open:>18.1f}")
    print(json.dumps({"round_trips_ms": results, "rss_mb": {
        "proxy": [idle_proxy, held_proxy], "replica": [idle_replica, held_replica]}}))
    figures = {f"round trip, {label}: {q}": Figure([r[i] for r in rows], "ms")
               for label, rows in results.items() for i, q in enumerate(("p50", "p99"))}
    figures[f"proxy memory per open WebSocket ({args.open} open)"] = Figure(
        [(held_proxy - idle_proxy) * 1024 / args.open], "KB")
    emit(figures)


async def _answers(url: str) -> bool:
    try:
        async with connect(url, open_timeout=5) as ws:
            await ws.send("hi")
            return await ws.recv() == "hi"
    except Exception:
        return False


if __name__ == "__main__":
    main()
