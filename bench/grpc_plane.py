"""gRPC ingress throughput and latency, beside a raw grpc.aio server with the same servicer.

    .venv/bin/python bench/grpc_plane.py [--duration 10] [--processes 4]

Runs, all on 127.0.0.1 in one go: the no-op servicer
(examples/grpc_classifier/noop.py) on a bare grpc.aio server (the ceiling,
bench/grpc_noop.py), and `servefleet proxy
--grpc-listen` in front of one replica of the same class (controller on
sqlite, process runtime), and proxyless gRPC clients (`xds:///bench`,
through the controller's xDS server) calling that replica directly. The load
is unary Predict calls from grpc.aio clients (ghz is not available here)
spread over --processes processes, for 1 and 16 concurrent callers; it
prints calls/s and p50 for the three and each one's share of the ceiling.
Goals: >= 0.3 of the raw server's calls/s at 16 callers through the proxy
(issue 15), >= 0.8 proxyless (issue 16). Then the time from a new replica
turning RUNNING to the first proxyless call it answers (bench/xds_pickup.py;
goal <= 1 s).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from figures import Figure, emit

from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port, wait_tcp
from servefleet._private.xds_bootstrap import render
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))

import xds_pickup  # noqa: E402
from grpc_classifier import classifier_pb2, classifier_pb2_grpc  # noqa: E402


async def _callers(target: str, callers: int, seconds: float, metadata) -> list[float]:
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(target) as channel:
        stub = classifier_pb2_grpc.ClassifierStub(channel)
        request = classifier_pb2.PredictRequest(text="x")
        await stub.Predict(request, metadata=metadata, timeout=10)  # connect first
        end = time.perf_counter() + seconds

        async def caller() -> None:
            while (start := time.perf_counter()) < end:
                await stub.Predict(request, metadata=metadata, timeout=10)
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*[caller() for _ in range(callers)])
    return latencies


def _client(target: str, callers: int, seconds: float, metadata, out) -> None:
    out.put(asyncio.run(_callers(target, callers, seconds, metadata)))


def load(target: str, callers: int, processes: int, seconds: float,
         metadata=()) -> dict[str, float]:
    """`callers` concurrent callers spread over up to `processes` processes."""
    processes = min(processes, callers)
    share = [callers // processes + (i < callers % processes) for i in range(processes)]
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(target, n, seconds, metadata, out))
             for n in share]
    for p in procs:
        p.start()
    latencies = sorted(x for _ in procs for x in out.get(timeout=seconds + 60))
    for p in procs:
        p.join()
    return {"rps": len(latencies) / seconds,
            "p50": latencies[len(latencies) // 2] * 1e3,
            "p99": latencies[int(len(latencies) * 0.99)] * 1e3}


def wait_answers(target: str, metadata, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        stub = classifier_pb2_grpc.ClassifierStub(channel)
        while True:
            try:
                stub.Predict(classifier_pb2.PredictRequest(), metadata=metadata, timeout=5)
                return
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--processes", type=int, default=4,
                        help="client processes the callers are spread over (default 4)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="servefleet-grpcplane-")
    raw_port, grpc_port = free_port(), free_port()
    raw = subprocess.Popen([sys.executable, str(HERE / "grpc_noop.py"), str(raw_port)])
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work, extra_args=[
        "--allow-working-dir", str(HERE.parent / "examples")])
    proxy = None
    metadata = (("application", "bench"),)
    results = {}
    try:
        wait_tcp(raw_port, 30, raw, "raw gRPC server")
        controller.start()
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address) as client:
            client.deploy_applications([apb.ApplicationSpec(
                name="bench", import_path="grpc_classifier.noop:app", no_route=True,
                grpc_servicer_functions=["grpc_classifier.classifier_pb2_grpc:"
                                         "add_ClassifierServicer_to_server"],
                runtime=d.RuntimeOptions(working_dir=str(HERE.parent / "examples")))])
        proxy = ProxyProcess([controller.address], log_dir=work,
                             extra_args=["--grpc-listen", f"127.0.0.1:{grpc_port}"]).start()
        wait_answers(f"127.0.0.1:{grpc_port}", metadata)
        # Proxyless clients read the bootstrap from the environment they inherit.
        os.environ["GRPC_XDS_BOOTSTRAP_CONFIG"] = render([controller.address])
        wait_answers("xds:///bench", ())
        for callers in (1, 16):
            results[callers] = (
                load(f"127.0.0.1:{raw_port}", callers, args.processes, args.duration),
                load(f"127.0.0.1:{grpc_port}", callers, args.processes, args.duration,
                     metadata),
                load("xds:///bench", callers, args.processes, args.duration))
        pickup = xds_pickup.measure(controller.address)
    finally:
        if proxy is not None:
            proxy.stop()
        raw.terminate()
        raw.wait()
        with contextlib.suppress(Exception), ControllerClient(controller.address,
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()
    print(f"servefleet gRPC, unary no-op (grpc.aio clients in up to {args.processes} "
          f"processes, {args.duration:g}s per run; {os.cpu_count()} cores; goals: proxy >= 0.3 "
          "and proxyless xDS >= 0.8 of raw at 16 callers)")
    print(f"  {'callers':<9}{'raw calls/s':>12}{'p50':>8}{'proxy calls/s':>15}{'p50':>8}"
          f"{'ratio':>7}{'xDS calls/s':>13}{'p50':>8}{'ratio':>7}")
    for callers, (raw_r, proxy_r, xds_r) in results.items():
        print(f"  {callers:<9}{raw_r['rps']:>12.0f}{raw_r['p50']:>6.2f}ms"
              f"{proxy_r['rps']:>15.0f}{proxy_r['p50']:>6.2f}ms"
              f"{proxy_r['rps'] / raw_r['rps']:>7.2f}{xds_r['rps']:>13.0f}"
              f"{xds_r['p50']:>6.2f}ms{xds_r['rps'] / raw_r['rps']:>7.2f}")
    pickup_ms = sorted(x * 1e3 for x in pickup)
    print(f"  a new replica RUNNING -> its first proxyless call, {len(pickup_ms)} replicas "
          f"added one by one: p50 {pickup_ms[len(pickup_ms) // 2]:.0f} ms, max "
          f"{pickup_ms[-1]:.0f} ms (goal <= 1 s)")
    print(json.dumps({"calls": {c: {"raw": r, "proxy": p, "xds": x}
                                for c, (r, p, x) in results.items()},
                      "pickup_s": pickup}))
    figures = {}
    for callers, (raw_r, proxy_r, xds_r) in results.items():
        top = callers == 16
        figures[f"{callers} callers, raw grpc.aio: calls/s"] = Figure(
            [raw_r["rps"]], "calls/s", lower_is_better=False, headline=top)
        figures[f"{callers} callers, through the proxy: share of raw"] = Figure(
            [proxy_r["rps"] / raw_r["rps"]], "x raw", lower_is_better=False, headline=top,
            goal=">= 0.3" if top else "")
        figures[f"{callers} callers, proxyless xDS: share of raw"] = Figure(
            [xds_r["rps"] / raw_r["rps"]], "x raw", lower_is_better=False, headline=top,
            goal=">= 0.8" if top else "")
    figures["a new replica RUNNING -> its first proxyless call: max"] = Figure(
        [pickup_ms[-1]], "ms", goal="<= 1000")
    emit(figures)


if __name__ == "__main__":
    main()
