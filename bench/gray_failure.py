"""A replica that hangs under load: what clients see, with and without passive health.

    .venv/bin/python bench/gray_failure.py [--request-timeout-s 20] [--window-s 10]

Issue 21's scenario, on 127.0.0.1: a controller (sqlite, process runtime),
two replicas of a 20 ms handler with the default health settings (checks
every 10 s, 30 s timeout, 3 failures), a proxy with the given request
timeout, and 8 clients sending GETs back to back. After 3 s one replica is
SIGSTOPped (hung, not dead). Printed for a proxy with `--no-passive-health`
(the behaviour before issue 21) and with it (the default), each run on its
own cluster: requests failed and p99 latency, over the requests the hang
could touch (in flight at the stop or sent in the window after it; a
failure counts the time it took to fail, and requests still waiting at the
end of the window are waited for), and seconds until the controller has the
replacement RUNNING (the run waits up to 3 minutes for it).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from figures import Figure, emit

HERE = Path(__file__).resolve().parent
APPS = str(HERE.parent / "tests" / "apps")


def run(passive: bool, timeout_s: float, window_s: float) -> dict[str, float]:
    import sys

    sys.path.insert(0, str(HERE.parent / "tests"))
    from loadgen import SteadyLoad

    from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import deployment_pb2 as d
    from servefleet.v1 import replica_pb2

    work = tempfile.mkdtemp(prefix="servefleet-gray-")
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work,
                                   extra_args=["--allow-working-dir", APPS]).start()
    proxy = None
    stopped = 0
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address, timeout=30) as client:
            client.deploy(d.DeploymentSpec(
                name="Slow", import_path="echo_app:Slow", route_prefix="/slow",
                runtime=d.RuntimeOptions(working_dir=APPS),
                replica_config=d.ReplicaConfig(num_replicas=2)))
            proxy = ProxyProcess([controller.address], log_dir=work, extra_args=[
                "--request-timeout-s", str(timeout_s),
                "--passive-health" if passive else "--no-passive-health"]).start()

            def running() -> list[str]:
                return [r.record.replica_id for r in client.replicas()
                        if r.state == replica_pb2.REPLICA_STATE_RUNNING]
            wait_for(lambda: len(running()) == 2, 60, "2 replicas RUNNING")
            url = proxy.url + "/slow?s=0.02"
            wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
            victim = client.replicas()[0].record
            with SteadyLoad(url, concurrency=8) as load:
                time.sleep(3)
                stopped = int(victim.handle.split(":")[0])
                os.kill(stopped, signal.SIGSTOP)
                hung_at, sent_from = time.monotonic(), time.perf_counter()

                def replaced() -> float:
                    now = running()
                    return time.monotonic() if len(now) == 2 and victim.replica_id not in now \
                        else 0.0
                replaced_at = 0.0
                while time.monotonic() < hung_at + window_s:
                    replaced_at = replaced_at or replaced()
                    time.sleep(0.2)
            # Requests still waiting at the end of the window finished (or failed)
            # before the load stopped. Every request the hang could touch counts
            # (in flight at the stop, or sent in the window), a failure at the
            # time it took to fail.
            sent = [(took, ok) for at, took, ok in load.requests
                    if at < sent_from + window_s and at + took > sent_from]
            window = [took for took, _ in sent]
            failed = sum(not ok for _, ok in sent)
            replaced_at = replaced_at or wait_for(replaced, 180, "the replacement RUNNING")
            return {"failed": failed,
                    "answered": len(window) - failed,
                    "p99_ms": 1e3 * statistics.quantiles(window, n=100)[98],
                    "replaced_s": replaced_at - hung_at}
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGCONT)
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(Exception), ControllerClient(controller.address,
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--request-timeout-s", type=float, default=20.0)
    parser.add_argument("--window-s", type=float, default=10.0)
    parser.add_argument("--variants", default="both", choices=["both", "passive", "before"],
                        help="passive: only the default; before: only --no-passive-health "
                             "(it waits ~100 s for a replacement)")
    args = parser.parse_args()
    variants = [(label, passive) for label, passive in (
        ("--no-passive-health (before)", False), ("passive health (default)", True))
        if args.variants == "both" or (args.variants == "passive") == passive]
    results = {label: run(passive, args.request_timeout_s, args.window_s)
               for label, passive in variants}
    print(f"one of 2 replicas SIGSTOPped under 8 clients; default health checks; request "
          f"timeout {args.request_timeout_s:g} s; figures for the {args.window_s:g} s after "
          "the stop")
    print(f"  {'':<32}{'failed':>8}{'answered':>10}{'p99 ms':>10}{'replaced after':>16}")
    for label, r in results.items():
        print(f"  {label:<32}{r['failed']:>8.0f}{r['answered']:>10.0f}{r['p99_ms']:>10.0f}"
              f"{r['replaced_s']:>14.1f} s")
    figures = {}
    for label, r in results.items():
        name = "SIGSTOP, passive health" if "default" in label else "SIGSTOP, --no-passive-health"
        figures[f"{name}: failed requests"] = Figure([r["failed"]], "requests", goal="<= 0"
                                                     if "default" in label else "")
        figures[f"{name}: replaced after"] = Figure([r["replaced_s"]], "s")
        figures[f"{name}: p99 in the window"] = Figure([r["p99_ms"]], "ms")
    emit(figures)


if __name__ == "__main__":
    main()
