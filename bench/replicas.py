"""Replica figures, each printed next to its baseline from the same run.

    .venv/bin/python bench/replicas.py [--runs 5] [--counts 1,10] [--deployments 1000]
        [--per 10] [--ticks 300]

1. Deploy RPC -> all replicas RUNNING on the process runtime, for each of
   `--counts` replicas of a trivial class (goal: p50 <= 1.0 s for one replica; Ray Serve
   2.60 took 4.3 s for `serve.run` of one replica on this kind of machine,
   as the issue reports). Baseline: one replica process started by hand and
   polled until it answers READY, i.e. the floor without a controller.
2. One reconcile tick with 1,000 deployments x 10 replicas, all RUNNING, on
   the fake runtime (goal: p99 <= 100 ms). Baseline: the planner alone over
   the same state, without observing or spawning anything.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from figures import Figure, emit

from servefleet._private.external_servers import EtcdServer
from servefleet._private.testing import ControllerProcess, free_port
from servefleet.client import ControllerClient
from servefleet.controller.reconcile.loop import tune_gc
from servefleet.controller.reconcile.planner import StartupFailures, plan_deployment
from servefleet.controller.reconcile.replica_client import CHANNEL_OPTIONS
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, replica_pb2_grpc, status_pb2

TESTS = Path(__file__).resolve().parent.parent / "tests"
APPS = str(TESTS / "apps")
sys.path.insert(0, str(TESTS))
from fakes import FakeControlPlane  # noqa: E402  (the same fakes the unit tests use)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(label: str, *cells: str) -> None:
    print(f"  {label:<46}" + "".join(f"{c:>14}" for c in cells))


def echo(replicas: int, version: str) -> d.DeploymentSpec:
    # Deleted between runs: an idle replica need not wait the default 2 s drain loop.
    return d.DeploymentSpec(name="Echo", import_path="echo_app:Echo", version=version,
                            runtime=d.RuntimeOptions(working_dir=APPS),
                            replica_config=d.ReplicaConfig(num_replicas=replicas,
                                                           graceful_shutdown_wait_loop_s=0.1))


def wait_healthy(client: ControllerClient, version: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for app in client.status().applications:
            for dep in app.deployments:
                if (dep.version == version
                        and dep.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY):
                    return
        time.sleep(0.01)
    raise TimeoutError("deployment did not become healthy")


def bare_replica_start() -> float:
    """Start one replica process directly and wait until it reports READY."""
    with tempfile.TemporaryDirectory() as tmp:
        settings = Path(tmp) / "settings.json"
        settings.write_text(json.dumps({"import_path": "echo_app:Echo", "working_dir": APPS}))
        control = free_port()
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "servefleet.replica", "--cluster", "b",
                                 "--application", "b", "--deployment", "b", "--replica-id", "b",
                                 "--version", "b", "--control-port", str(control),
                                 "--http-port", str(free_port()), "--config-file",
                                 str(settings)], stderr=subprocess.DEVNULL)
        with grpc.insecure_channel(f"127.0.0.1:{control}", options=CHANNEL_OPTIONS) as channel:
            stub = replica_pb2_grpc.ReplicaServiceStub(channel)
            while True:
                try:
                    meta = stub.GetMetadata(replica_pb2.GetMetadataRequest(), timeout=1)
                    if meta.phase == replica_pb2.REPLICA_PHASE_READY:
                        break
                except grpc.RpcError:
                    pass
                time.sleep(0.01)
        elapsed = time.perf_counter() - start
        proc.terminate()
        proc.wait()
        return elapsed


def bench_deploy_to_running(runs: int, counts: list[int]) -> dict[str, Figure]:
    etcd = EtcdServer().start()
    controller = ControllerProcess(etcd.url, cluster="bench",
                                   extra_args=["--allow-working-dir", APPS]).start()
    results: dict[int, list[float]] = {count: [] for count in counts}
    try:
        with ControllerClient(controller.address) as client:
            for count in counts:
                for i in range(runs):
                    version = f"v{count}-{i}"
                    start = time.perf_counter()
                    client.deploy(echo(count, version))
                    wait_healthy(client, version)
                    results[count].append(time.perf_counter() - start)
                    client.delete(["Echo"])
                    while client.replicas():
                        time.sleep(0.05)
        floor = [bare_replica_start() for _ in range(runs)]
    finally:
        controller.stop()
        etcd.stop()
    print(f"\n1. Deploy RPC -> all replicas RUNNING, process runtime, {runs} runs each "
          "(goal p50 <= 1.0 s for one)")
    row("", "p50", "max")
    for count, samples in results.items():
        row(f"{count} replica(s) through the controller",
            f"{statistics.median(samples):.2f} s", f"{max(samples):.2f} s")
    row("baseline: one replica process started by hand",
        f"{statistics.median(floor):.2f} s", f"{max(floor):.2f} s")
    figures = {f"deploy -> RUNNING, {count} replica{'s' if count > 1 else ''}": Figure(
        samples, "s", goal="<= 1.0" if count in (1, 10) else "", headline=count in (1, 10),
        baseline="one replica process started by hand") for count, samples in results.items()}
    figures["one replica process started by hand"] = Figure(floor, "s")
    return figures


async def bench_tick(deployments: int, per: int, ticks: int) -> dict[str, Figure]:
    tune_gc()  # as `servefleet controller` does
    world = FakeControlPlane()
    term = await world.lead()
    for i in range(deployments):
        await term.deployments.deploy(d.DeploymentSpec(
            name=f"m{i}", import_path="m:C",
            replica_config=d.ReplicaConfig(num_replicas=per, health_check_period_s=10)))
    await world.settle(term, ticks=40, step_s=0.5)  # start and probe until all run
    running = sum(observed.counts().get("RUNNING", 0)
                  for observed in term.observed.deployments.values())
    tick_times, plan_times = [], []
    for _ in range(ticks):
        world.clock.advance(0.1)
        start = time.perf_counter()
        await term.loop.run_pass()
        tick_times.append(time.perf_counter() - start)
        await term.loop.wait_idle()
        start = time.perf_counter()
        for observed in term.observed.deployments.values():
            plan_deployment(observed.goal, [r.view for r in observed.replicas],
                            StartupFailures(), world.clock.monotonic())
        plan_times.append(time.perf_counter() - start)
    await world.close()
    print(f"\n2. Reconcile tick, {deployments} deployments x {per} replicas "
          f"({running} RUNNING), fake runtime, {ticks} ticks (goal p99 <= 100 ms)")
    row("", "p50", "p99")
    row("tick: observe, plan, dispatch", f"{percentile(tick_times, 0.5) * 1e3:.1f} ms",
        f"{percentile(tick_times, 0.99) * 1e3:.1f} ms")
    row("baseline: the planner alone", f"{percentile(plan_times, 0.5) * 1e3:.1f} ms",
        f"{percentile(plan_times, 0.99) * 1e3:.1f} ms")
    name = f"reconcile tick, {deployments} deployments x {per} replicas"
    return {f"{name}: p50": Figure([percentile(tick_times, 0.5) * 1e3], "ms"),
            f"{name}: p99": Figure([percentile(tick_times, 0.99) * 1e3], "ms", goal="<= 100"),
            "the planner alone: p99": Figure([percentile(plan_times, 0.99) * 1e3], "ms")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--counts", default="1,10", help="replica counts to deploy")
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--per", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=300)
    args = parser.parse_args()
    print("servefleet replica bench")
    figures = bench_deploy_to_running(args.runs, [int(c) for c in args.counts.split(",")])
    figures.update(asyncio.run(bench_tick(args.deployments, args.per, args.ticks)))
    emit(figures)


if __name__ == "__main__":
    main()
