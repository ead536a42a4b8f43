"""Autoscaling figures, each printed next to its baseline from the same run.

    .venv/bin/python bench/autoscaling.py [--clients 32] [--reporters 1000]

1. A step load: 1 client, then `--clients` at once, then none, through a
   proxy to a handler that sleeps 100 ms (echo_app.Slow), autoscaled with
   target_ongoing_requests 4, max_replicas clients/4, upscale_delay_s 0,
   downscale_delay_s 5, look_back_period_s 1. Printed: seconds from the step
   until the target count is RUNNING (goal: <= metrics_interval_s + 2 s =
   2.5 s), until p99 latency is back under 2x the handler time, and from the
   load stopping until one replica is left; failed requests (goal: 0).
   Baseline: the same number of replicas deployed at once (num_replicas),
   deploy -> all RUNNING.
2. Cold start: a deployment at zero replicas (min_replicas 0), one request;
   its latency (goal <= 1.5 s). Baseline: the same request to a warm replica.
3. Controller CPU while `--reporters` reporters each send a load report
   every second, over a StreamLoad stream each and as unary ReportLoad calls
   (goal: under 10% of one core). Baselines: the idle controller, and the
   floor of gRPC itself: a bare grpc.aio server whose StreamLoad reads the
   same streams and does nothing with them.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import threading
import time
from pathlib import Path

import grpc
import httpx
import psutil
from figures import Figure, emit

from servefleet._private.external_servers import EtcdServer
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient
from servefleet.v1 import controller_pb2, controller_pb2_grpc, replica_pb2
from servefleet.v1 import deployment_pb2 as d

APPS = str(Path(__file__).resolve().parent.parent / "tests" / "apps")
RUNNING = replica_pb2.REPLICA_STATE_RUNNING
HANDLER_S = 0.1


FIGURES: dict[str, Figure] = {}


def row(label: str, *cells: str) -> None:
    print(f"  {label:<58}" + "".join(f"{c:>14}" for c in cells))


def spec(name: str, route: str, **replica_config) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="echo_app:Slow", route_prefix=route,
                            runtime=d.RuntimeOptions(working_dir=APPS),
                            replica_config=d.ReplicaConfig(
                                graceful_shutdown_wait_loop_s=0.1,
                                graceful_shutdown_timeout_s=5, **replica_config))


def running(client: ControllerClient, name: str) -> int:
    return sum(1 for r in client.replicas(deployment=name) if r.state == RUNNING)


def wait_until(check, timeout: float = 120.0, step: float = 0.05) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if check():
            return time.perf_counter() - start
        time.sleep(step)
    raise TimeoutError("the condition was not reached")


class Clients:
    """`count()` concurrent clients, changeable while running; every answer
    is kept as (time sent, latency, status)."""

    def __init__(self, url: str) -> None:
        self.url, self.wanted = url, 0
        self.results: list[tuple[float, float, int]] = []
        self._stop = False
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=256)) as http:
            async def client(n: int) -> None:
                while not self._stop:
                    if n >= self.wanted:
                        await asyncio.sleep(0.01)
                        continue
                    sent = time.perf_counter()
                    try:
                        status = (await http.get(self.url)).status_code
                    except httpx.HTTPError:
                        status = 0
                    self.results.append((sent, time.perf_counter() - sent, status))

            await asyncio.gather(*[client(n) for n in range(256)])

    def __enter__(self) -> Clients:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join(60)


def p99_recovered(results: list[tuple[float, float, int]], step_at: float) -> float | None:
    """Seconds from the step until the p99 of each following 1 s window is under
    2x the handler time, and stays so."""
    windows: dict[int, list[float]] = {}
    for sent, latency, _ in results:
        if sent >= step_at:
            windows.setdefault(int(sent - step_at), []).append(latency)
    bad = [w for w, lat in windows.items()
           if sorted(lat)[min(len(lat) - 1, int(0.99 * len(lat)))] > 2 * HANDLER_S]
    return float(max(bad) + 1) if bad else 0.0


def bench_step(client: ControllerClient, proxy: ProxyProcess, clients: int) -> None:
    top = max(2, clients // 4)
    client.deploy(spec("Fixed", "/fixed", num_replicas=1))
    wait_until(lambda: running(client, "Fixed") == 1)
    start = time.perf_counter()
    client.deploy(spec("Fixed", "/fixed", num_replicas=top))
    wait_until(lambda: running(client, "Fixed") == top)
    baseline = time.perf_counter() - start
    client.delete(["Fixed"])
    client.deploy(spec("Auto", "/auto", autoscaling_config=d.AutoscalingConfig(
        min_replicas=1, max_replicas=top, target_ongoing_requests=4, upscale_delay_s=0,
        downscale_delay_s=5, look_back_period_s=1, metrics_interval_s=0.5)))
    wait_until(lambda: running(client, "Auto") == 1)
    wait_until(lambda: httpx.get(f"{proxy.url}/auto?s=0").status_code == 200, 30)
    with Clients(f"{proxy.url}/auto?s={HANDLER_S}") as load:
        load.wanted = 1
        time.sleep(3)
        step_at = time.perf_counter()
        load.wanted = clients
        scaled = wait_until(lambda: running(client, "Auto") == top)
        time.sleep(max(0.0, 8 - (time.perf_counter() - step_at)))
        load.wanted = 0
        down = wait_until(lambda: running(client, "Auto") == 1, timeout=120)
    failed = sum(1 for _, _, status in load.results if status != 200)
    recovered = p99_recovered(load.results, step_at)
    print(f"\n1. Step load 1 -> {clients} clients -> 0, {HANDLER_S * 1e3:.0f} ms handler, "
          f"target 4 per replica, up to {top} replicas")
    row("", "seconds")
    row(f"step -> {top} replicas RUNNING (goal <= 2.5 s)", f"{scaled:.2f}")
    row("step -> p99 back under 2x the handler time (1 s windows)", f"{recovered:.0f}")
    row("load stopped -> 1 replica (downscale_delay_s 5)", f"{down:.2f}")
    row(f"failed requests, of {len(load.results)} (goal 0)", str(failed))
    row(f"baseline: deploy num_replicas 1 -> {top}, all RUNNING", f"{baseline:.2f}")
    FIGURES[f"step 1 -> {clients} clients: {top} replicas RUNNING"] = Figure(
        [scaled], "s", goal="<= 2.5")
    FIGURES["step: p99 back under 2x the handler time"] = Figure(
        [recovered] if recovered is not None else [], "s")
    FIGURES["load stopped: back to 1 replica (downscale_delay_s 5)"] = Figure([down], "s")
    FIGURES["step: failed requests"] = Figure([failed], "requests", goal="<= 0")
    client.delete(["Auto"])


def bench_cold_start(client: ControllerClient, proxy: ProxyProcess) -> None:
    client.deploy(spec("Cold", "/cold", autoscaling_config=d.AutoscalingConfig(
        min_replicas=0, initial_replicas=0, max_replicas=1, downscale_delay_s=1,
        downscale_to_zero_delay_s=1, look_back_period_s=1)))
    wait_until(lambda: "/cold" in httpx.get(f"{proxy.url}/-/routes").text, 30)
    cold = []
    for _ in range(3):
        wait_until(lambda: running(client, "Cold") == 0 and not client.replicas(
            deployment="Cold"), timeout=60)
        start = time.perf_counter()
        assert httpx.get(f"{proxy.url}/cold?s=0", timeout=60).status_code == 200
        cold.append(time.perf_counter() - start)
    start = time.perf_counter()
    httpx.get(f"{proxy.url}/cold?s=0", timeout=60)
    warm = time.perf_counter() - start
    print("\n2. Cold start from zero replicas, one request (3 runs)")
    row("", "median", "max")
    row("first request at zero replicas (goal <= 1.5 s)", f"{sorted(cold)[1]:.2f} s",
        f"{max(cold):.2f} s")
    row("baseline: the same request to a warm replica", f"{warm * 1e3:.1f} ms", "")
    FIGURES["cold start: first request at zero replicas"] = Figure(cold, "s", goal="<= 1.5")
    client.delete(["Cold"])


async def report_for(address: str, reporters: int, seconds: float, stream: bool,
                     keys: int = 1, period_s: float = 1.0) -> None:
    """`reporters` reporters, each sending a report on `keys` deployments every
    `period_s` for `seconds`, as unary ReportLoad calls or over a StreamLoad
    stream each."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)

        async def reports(n: int):
            await asyncio.sleep(period_s * n / reporters)  # spread over the period
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                yield controller_pb2.ReportLoadRequest(
                    reporter_id=f"r{n}",
                    ongoing={f"default/D{(n + k) % 1000}": (n + k) % 7 for k in range(keys)})
                await asyncio.sleep(period_s)

        async def reporter(n: int) -> None:
            if stream:
                await stub.StreamLoad(controller_pb2.StreamLoadRequest(report=r)
                                      async for r in reports(n))
            else:
                async for report in reports(n):
                    await stub.ReportLoad(report, timeout=5)

        await asyncio.gather(*[reporter(n) for n in range(reporters)])


def cpu_share(proc: psutil.Process, seconds: float, during=None) -> float:
    before = proc.cpu_times()
    start = time.perf_counter()
    if during is not None:
        during()
    else:
        time.sleep(seconds)
    after = proc.cpu_times()
    used = (after.user - before.user) + (after.system - before.system)
    return used / (time.perf_counter() - start)


class _Discard(controller_pb2_grpc.ControllerServiceServicer):
    async def StreamLoad(self, requests, context):
        async for _ in requests:
            pass
        return controller_pb2.StreamLoadResponse()


def _serve_discard(port: int) -> None:
    async def main() -> None:
        server = grpc.aio.server()
        controller_pb2_grpc.add_ControllerServiceServicer_to_server(_Discard(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()
    asyncio.run(main())


# Seconds each way of reporting is measured: 10,000 reports and more each.
REPORT_S = 10


def grpc_floor(reporters: int) -> float:
    """One core's share a bare grpc.aio server spends reading the reports."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = multiprocessing.get_context("spawn").Process(target=_serve_discard, args=(port,))
    server.start()
    try:
        time.sleep(1.5)
        return cpu_share(psutil.Process(server.pid), 0, lambda: asyncio.run(
            report_for(f"127.0.0.1:{port}", reporters, REPORT_S, True)))
    finally:
        server.kill()
        server.join()


def bench_report_cpu(controller: ControllerProcess, reporters: int) -> None:
    assert controller.proc is not None
    proc = psutil.Process(controller.proc.pid)
    idle = cpu_share(proc, 5)
    modes = {  # label: (reporters, stream, deployments per report, period)
        f"{reporters} reporters, 1/s each, StreamLoad (goal < 10%)": (reporters, True, 1, 1.0),
        f"{reporters} reporters, 1/s each, unary ReportLoad": (reporters, False, 1, 1.0),
        "10 proxies, 100 deployments per report, every 0.5 s": (10, True, 100, 0.5),
    }
    shares = {label: cpu_share(proc, 0, lambda m=mode: asyncio.run(
        report_for(controller.address, m[0], REPORT_S, m[1], m[2], m[3])))
        for label, mode in modes.items()}
    print(f"\n3. Controller CPU while load reports arrive, {REPORT_S} s each")
    row("", "one core")
    for label, share in shares.items():
        row(label, f"{share * 100:.1f}%")
    row("baseline: the idle controller", f"{idle * 100:.1f}%")
    floor = grpc_floor(reporters)
    row(f"floor: a bare grpc.aio server reading the {reporters} streams", f"{floor * 100:.1f}%")
    first = next(iter(shares.values()))
    FIGURES[f"controller CPU, {reporters} StreamLoad reporters at 1/s"] = Figure(
        [first * 100], "% of a core", goal="<= 10")
    FIGURES["floor: a bare grpc.aio server, the same streams"] = Figure([floor * 100],
                                                                       "% of a core")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--reporters", type=int, default=1000)
    args = parser.parse_args()
    print("servefleet autoscaling bench")
    etcd = EtcdServer().start()
    controller = ControllerProcess(etcd.url, cluster="bench",
                                   extra_args=["--allow-working-dir", APPS]).start()
    proxy = ProxyProcess([controller.address]).start()
    try:
        with ControllerClient(controller.address, timeout=30) as client:
            bench_step(client, proxy, args.clients)
            bench_cold_start(client, proxy)
            bench_report_cpu(controller, args.reporters)
            client.shutdown()
        emit(FIGURES)
    finally:
        proxy.stop()
        controller.stop()
        etcd.stop()


if __name__ == "__main__":
    main()
