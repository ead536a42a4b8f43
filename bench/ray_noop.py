"""The data-plane no-op on Ray Serve, for bench/run-all --ray-python PATH.

    PATH bench/ray_noop.py [--duration 3] [--connections 1,16,64] [--rounds 3]

Run by a Python that has Ray Serve installed (a venv of its own: Ray is never
a dependency of servefleet). Starts a local Ray with Serve's HTTP proxy on
127.0.0.1, deploys one replica of an `async def` no-op (the same handler as
the raw app and servefleet's no-op in bench/data_plane.py), drives it with
wrk at each connection count for `--rounds` rounds, prints its figures in
the form of bench/figures.py (written out here: this interpreter has no
servefleet) and shuts Ray down, also when it fails.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

MARK = "BENCH-FIGURES "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wrk(url: str, connections: int, duration: int) -> dict[str, float]:
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", url],
                         capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]

    def ms(q: str) -> float:
        value, unit = re.search(rf"^\s+{q}%\s+([\d.]+)(\w+)", out, re.M).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    return {"rps": rps, "p50": ms("50"), "p99": ms("99")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--connections", default="1,16,64")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk not found: apt-get install wrk")
    import ray  # type: ignore[import-not-found]
    from ray import serve  # type: ignore[import-not-found]

    port = free_port()
    ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})

        @serve.deployment(num_replicas=1, max_ongoing_requests=100)
        class Noop:
            async def __call__(self, request) -> str:
                return "ok"

        serve.run(Noop.bind(), route_prefix="/")
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 120
        while True:
            try:
                if urllib.request.urlopen(url, timeout=5).status == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        counts = [int(c) for c in args.connections.split(",")]
        wrk(url, 16, 2)  # warm up
        runs: dict[int, list[dict[str, float]]] = {c: [] for c in counts}
        for _ in range(args.rounds):
            for c in counts:
                runs[c].append(wrk(url, c, args.duration))
    finally:
        serve.shutdown()
        ray.shutdown()
    figures = {}
    for c, results in runs.items():
        name = f"Ray Serve, {c} connections"
        figures[f"{name}: requests/s"] = {"samples": [r["rps"] for r in results], "unit": "rps",
                                          "lower_is_better": False, "headline": c == 16}
        for q in ("p50", "p99"):
            figures[f"{name}: {q}"] = {"samples": [r[q] for r in results], "unit": "ms",
                                       "headline": False}
    for c, results in runs.items():
        print(f"Ray Serve no-op, {c} connections: "
              + ", ".join(f"{r['rps']:.0f} rps p50 {r['p50']:.2f} ms" for r in results))
    print(MARK + json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
