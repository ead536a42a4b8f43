"""Proxy memory under traffic: RSS after 100,000 and after 1,000,000 requests.

    .venv/bin/python bench/proxy_memory.py [--requests 1000000]   (needs Debian's wrk)

Goal (issue 4): RSS after 1,000,000 requests within 10% of RSS after
100,000. Baseline, same run: the proxy's RSS before any traffic. wrk drives
16 connections through `servefleet proxy` to one no-op replica; the count of
requests served is read from wrk's output.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from figures import Figure, emit

from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

APPS = str(Path(__file__).resolve().parent.parent / "tests" / "apps")


def drive(url: str, count: int) -> int:
    """Send about `count` requests with wrk; returns how many it reports."""
    done = 0
    while done < count:
        out = subprocess.run(["wrk", "-t", "1", "-c", "16", "-d", "10s", url],
                             capture_output=True, text=True, check=True).stdout
        done += int(re.search(r"(\d+) requests in", out).group(1))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="servefleet-memory-")
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work,
                                   extra_args=["--allow-working-dir", APPS]).start()
    proxy = None
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address) as client:
            client.deploy(d.DeploymentSpec(
                name="Noop", import_path="echo_app:noop", route_prefix="/noop",
                runtime=d.RuntimeOptions(working_dir=APPS),
                replica_config=d.ReplicaConfig(max_ongoing_requests=100)))
        proxy = ProxyProcess([controller.address], log_dir=work).start()
        while True:
            try:
                if httpx.get(proxy.url + "/noop", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert proxy.proc is not None
        process = psutil.Process(proxy.proc.pid)
        idle = process.memory_info().rss
        first = drive(proxy.url + "/noop", args.requests // 10)
        at_tenth = process.memory_info().rss
        total = first + drive(proxy.url + "/noop", args.requests - first)
        at_end = process.memory_info().rss
    finally:
        if proxy is not None:
            proxy.stop()
        with ControllerClient(controller.address, timeout=10) as client:
            client.shutdown()
        controller.stop()
    growth = (at_end - at_tenth) / at_tenth * 100
    print("servefleet proxy memory (goal: RSS after 1M requests within 10% of after 100k)")
    print(f"  idle (baseline)             {idle / 2**20:8.1f} MB")
    print(f"  after {first:>9,} requests  {at_tenth / 2**20:8.1f} MB")
    print(f"  after {total:>9,} requests  {at_end / 2**20:8.1f} MB   ({growth:+.1f}%)")
    emit({f"proxy RSS growth from {first:,} to {total:,} requests": Figure(
              [growth], "%", goal="<= 10"),
          f"proxy RSS after {total:,} requests": Figure([at_end / 2**20], "MB")})


if __name__ == "__main__":
    main()
