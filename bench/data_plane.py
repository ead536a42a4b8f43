"""Data-plane throughput and latency, with wrk, beside the raw app ceiling.

    .venv/bin/python bench/data_plane.py [--duration 10] [--handler async|sync] [--tls]
                                                         (needs Debian's wrk)

Runs, all on 127.0.0.1 in one go: a bare uvicorn + starlette hello app (the
ceiling of this machine), and `servefleet proxy` in front of one no-op
replica (controller on sqlite, process runtime). The no-op is `async def`,
the same handler as the raw app's; `--handler sync` measures a plain `def`,
which the replica runs in its thread pool. For 1, 16 and 64
connections it prints requests/s, p50 and p99 for both, and the proxy's share
of the ceiling. Goals (issue 4): >= 4,000 rps through one proxy to one replica
at 16 connections, >= 0.25 of the raw app; p50 <= 1.5 ms at one connection.

With --tls a second proxy serves HTTPS (--tls-cert/--tls-key, a certificate
from `servefleet certs init`) in front of the same replica, and the same
runs go to it: TLS on vs off, side by side (issue 13).

With --metrics, at 16 connections: a proxy started with --no-metrics beside
the default one, and the default one again while a client scrapes its
/-/metrics every 100 ms (issue 14: the cost of counting and of scraping).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from servefleet.client import ControllerClient
from servefleet.security.certs import init_certs
from servefleet.testing import ControllerProcess, ProxyProcess, _wait_tcp, free_port
from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent
APPS = str(HERE.parent / "tests" / "apps")
UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(url: str, connections: int, duration: int) -> dict[str, float]:
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration}s",
                          "--latency", url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    found = {}
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        found[pct] = float(m.group(1)) * UNITS[m.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "p50": found["50"], "p99": found["99"],
            "non2xx": float(errors.group(1)) if errors else 0.0}


def scraped(base: str, duration: int) -> dict[str, float]:
    """wrk at 16 connections while another thread GETs /-/metrics every 100 ms."""
    stop = threading.Event()
    times: list[float] = []

    def scrape() -> None:
        with httpx.Client(timeout=5) as http:
            while not stop.wait(0.1):
                began = time.perf_counter()
                http.get(base + "/-/metrics").raise_for_status()
                times.append(time.perf_counter() - began)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        result = wrk(base + "/noop", 16, duration)
    finally:
        stop.set()
        scraper.join()
    return {**result, "scrapes": float(len(times)),
            "scrape_ms": 1e3 * sum(times) / max(1, len(times))}


def wait_ok(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(url)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--handler", choices=["async", "sync"], default="async",
                        help="the replica's no-op: `async def` like the raw app's handler "
                             "(default), or a plain def, which takes a thread-pool hop")
    parser.add_argument("--metrics", action="store_true",
                        help="also measure --no-metrics, and scraping every 100 ms")
    parser.add_argument("--tls", action="store_true",
                        help="also measure a proxy serving HTTPS in front of the same replica")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk not found: apt-get install wrk")
    work = tempfile.mkdtemp(prefix="servefleet-dataplane-")
    port = free_port()
    raw = subprocess.Popen([sys.executable, str(HERE / "hello_app.py"), str(port)])
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work)
    proxy = https = bare = None
    metrics_results: dict[str, dict[str, float]] = {}
    try:
        controller.start()
        _wait_tcp(port, 30, raw, "hello app")
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address) as client:
            client.deploy(d.DeploymentSpec(
                name="Noop", route_prefix="/noop",
                import_path="echo_app:async_noop" if args.handler == "async" else "echo_app:noop",
                runtime=d.RuntimeOptions(working_dir=APPS),
                replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=100)))
        proxy = ProxyProcess([controller.address], log_dir=work).start()
        wait_ok(proxy.url + "/noop")
        if args.tls:
            init_certs(f"{work}/certs")
            https = ProxyProcess([controller.address], log_dir=work, extra_args=[
                "--tls-cert", f"{work}/certs/proxy.crt", "--tls-key", f"{work}/certs/proxy.key"])
            https.start()
        results, tls_results = {}, {}
        for connections in (1, 16, 64):
            results[connections] = (wrk(f"http://127.0.0.1:{port}/noop", connections,
                                        args.duration),
                                    wrk(proxy.url + "/noop", connections, args.duration))
            if https is not None:
                tls_results[connections] = wrk(f"https://127.0.0.1:{https.port}/noop",
                                               connections, args.duration)
        if args.metrics:
            bare = ProxyProcess([controller.address], log_dir=work,
                                extra_args=["--no-metrics"]).start()
            wait_ok(bare.url + "/noop")
            metrics_results = {
                "on": wrk(proxy.url + "/noop", 16, args.duration),
                "off": wrk(bare.url + "/noop", 16, args.duration),
                "scraped": scraped(proxy.url, args.duration)}
    finally:
        for started in (proxy, https, bare):
            if started is not None:
                started.stop()
        raw.terminate()
        raw.wait()
        with contextlib.suppress(Exception), ControllerClient(controller.address,
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()
    print(f"servefleet data plane, {args.handler} no-op replica (wrk, 1 thread, "
          f"{args.duration}s per run; goals: >= 4,000 rps and >= 0.25 of raw at 16 "
          "connections, p50 <= 1.5 ms at 1)")
    print(f"  {'connections':<12}{'raw rps':>10}{'raw p50':>10}{'raw p99':>10}"
          f"{'proxy rps':>11}{'proxy p50':>11}{'proxy p99':>11}{'ratio':>8}{'errors':>8}")
    for connections, (raw_r, proxy_r) in results.items():
        print(f"  {connections:<12}{raw_r['rps']:>10.0f}{raw_r['p50']:>8.2f}ms"
              f"{raw_r['p99']:>8.2f}ms{proxy_r['rps']:>11.0f}{proxy_r['p50']:>9.2f}ms"
              f"{proxy_r['p99']:>9.2f}ms{proxy_r['rps'] / raw_r['rps']:>8.2f}"
              f"{proxy_r['non2xx']:>8.0f}")
    if tls_results:
        print("  TLS on the proxy's ingress (same replica, same run):")
        print(f"  {'connections':<12}{'http rps':>10}{'http p50':>10}{'https rps':>11}"
              f"{'https p50':>11}{'https p99':>11}{'ratio':>8}")
        for connections, tls in tls_results.items():
            plain = results[connections][1]
            print(f"  {connections:<12}{plain['rps']:>10.0f}{plain['p50']:>8.2f}ms"
                  f"{tls['rps']:>11.0f}{tls['p50']:>9.2f}ms{tls['p99']:>9.2f}ms"
                  f"{tls['rps'] / plain['rps']:>8.2f}")
    if metrics_results:
        on, off, scraped_r = (metrics_results[k] for k in ("on", "off", "scraped"))
        print("  Metrics at 16 connections (same replica, same run):")
        print(f"    --no-metrics {off['rps']:.0f} rps; metrics on {on['rps']:.0f} rps "
              f"({on['rps'] / off['rps']:.2f} of off); on and scraped every 100 ms "
              f"{scraped_r['rps']:.0f} rps ({scraped_r['rps'] / on['rps']:.2f} of on, "
              f"{scraped_r['scrapes']:.0f} scrapes, {scraped_r['scrape_ms']:.1f} ms each)")
    print(json.dumps({c: {"raw": r, "proxy": p, "proxy_tls": tls_results.get(c)}
                      for c, (r, p) in results.items()}))


if __name__ == "__main__":
    main()
