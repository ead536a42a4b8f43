"""A real model served: the digits classifier (examples/digits/model.onnx,
ONNX Runtime), one replica, POSTed 8x8 images as JSON by wrk.

    .venv/bin/python bench/models.py [--duration 5] [--ray-python PATH]   (needs wrk)

Side by side in one run, each system alone on the machine:
- baseline: the same model in one plain uvicorn + starlette process, no batching;
- servefleet: proxy + one replica, without and with @batch (max 32),
  at 1, 16 and 64 connections: requests/s, p50, p99;
- the pipeline (ingress -> classifier through a handle, the image as a numpy
  array) against the same two steps in one process, at 1 connection: the
  cost of the hop, p50 and p99;
- Ray Serve with the same model and batch settings, with --ray-python (a
  Python with ray[serve], onnxruntime and numpy).
Goals (issue 35): unbatched >= 0.85x the baseline at 16 connections; @batch
>= 2x the baseline at 64; the pipeline's hop <= 1 ms at p50.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from figures import Figure, emit
from wrk_run import UNITS

from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent
CONNECTIONS = (1, 16, 64)
# A held-out digit from load_digits, as the JSON a client sends.
BODY = json.dumps({"image": [[0, 0, 5, 13, 9, 1, 0, 0], [0, 0, 13, 15, 10, 15, 5, 0],
                             [0, 3, 15, 2, 0, 11, 8, 0], [0, 4, 12, 0, 0, 8, 8, 0],
                             [0, 5, 8, 0, 0, 9, 8, 0], [0, 4, 11, 0, 1, 12, 7, 0],
                             [0, 2, 14, 5, 10, 12, 0, 0], [0, 0, 6, 13, 10, 0, 0, 0]]})


def wrk_post(url: str, connections: int, duration: int) -> dict[str, float]:
    """wrk POSTing BODY: requests/s, p50 and p99 (ms), non-2xx answers."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(f'wrk.method = "POST"\nwrk.body = {json.dumps(BODY)}\n'
                     'wrk.headers["Content-Type"] = "application/json"\n')
    try:
        out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration}s",
                              "--latency", "-s", script.name, url],
                             capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script.name)
    found = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}  # type: ignore[union-attr]
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert m is not None, out
        found[f"p{pct}"] = float(m.group(1)) * UNITS[m.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    found["non2xx"] = float(errors.group(1)) if errors else 0.0
    return found


def ready(url: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.post(url, content=BODY, timeout=5).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer within {timeout_s:g} s")


def baseline(duration: int) -> dict[int, dict[str, float]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "models_app:baseline_app",
                             "--port", str(port), "--log-level", "warning", "--loop", "uvloop",
                             "--http", "httptools"], cwd=HERE,
                            env={**os.environ, "MODELS_BASELINE": "1"})
    try:
        url = f"http://127.0.0.1:{port}/"
        ready(url)
        return {c: wrk_post(url, c, duration) for c in CONNECTIONS}
    finally:
        proc.terminate()
        proc.wait(10)


def start_controller(work: str) -> ControllerProcess:
    """A controller that runs the bench's own code (models_app.py, here)
    from whatever directory the bench is run in."""
    return ControllerProcess(f"sqlite://{work}/state.db", log_dir=work,
                             extra_args=["--allow-working-dir", str(HERE)]).start()


def deployments() -> list[d.DeploymentSpec]:
    """The model without and with @batch, the two steps in one process, and
    the pipeline (Ingress calls Classifier through a handle)."""
    runtime = d.RuntimeOptions(working_dir=str(HERE))
    one = d.ReplicaConfig(num_replicas=1, max_ongoing_requests=64)
    specs = [d.DeploymentSpec(name=name, import_path=f"models_app:{name}",
                              route_prefix=f"/{name}", runtime=runtime, replica_config=one)
             for name in ("Unbatched", "Batched", "OneProcess")]
    return [*specs,
            d.DeploymentSpec(name="Classifier", import_path="models_app:Classifier",
                             runtime=runtime, replica_config=one),
            d.DeploymentSpec(name="Ingress", import_path="models_app:Ingress",
                             route_prefix="/Ingress", runtime=runtime, replica_config=one,
                             init_args_json=json.dumps([{"__servefleet_handle__": {
                                 "deployment": "Classifier"}}]))]


def servefleet(duration: int) -> dict[str, dict[int, dict[str, float]]]:
    work = tempfile.mkdtemp(prefix="servefleet-models-")
    controller = start_controller(work)
    proxy = None
    results: dict[str, dict[int, dict[str, float]]] = {}
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address) as client:
            for spec in deployments():
                client.deploy(spec)
        proxy = ProxyProcess([controller.address], log_dir=work).start()
        for name in ("Unbatched", "Batched", "OneProcess", "Ingress"):
            ready(f"{proxy.url}/{name}")
        for name in ("Unbatched", "Batched"):
            results[name] = {c: wrk_post(f"{proxy.url}/{name}", c, duration)
                             for c in CONNECTIONS}
        for name in ("OneProcess", "Ingress"):
            results[name] = {1: wrk_post(f"{proxy.url}/{name}", 1, duration)}
    finally:
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(Exception), ControllerClient(controller.address,
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()
    return results


def on_ray(ray_python: str, duration: int) -> dict[str, dict[int, dict[str, float]]]:
    """models_ray.py under Ray's interpreter serves both; wrk measures from here."""
    proc = subprocess.Popen([ray_python, str(HERE / "models_ray.py")], cwd=HERE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "READY <port>" once both are served
        if not line.startswith("READY"):
            raise SystemExit(f"Ray Serve did not start: {line!r}")
        base = f"http://127.0.0.1:{line.split()[1]}"
        return {name: {c: wrk_post(f"{base}/{name}", c, duration) for c in CONNECTIONS}
                for name in ("Unbatched", "Batched")}
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--ray-python", default="", metavar="PATH")
    args = parser.parse_args()
    base = baseline(args.duration)
    ours = servefleet(args.duration)
    ray = on_ray(args.ray_python, args.duration) if args.ray_python else {}
    figures: dict[str, Figure] = {}
    print(f"digits model (ONNX Runtime), one replica, {args.duration}s per point")
    print(f"{'system':<26}{'conns':>6}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    rows = [("baseline (one process)", base)] + [
        (f"servefleet {n.lower()}", ours[n]) for n in ("Unbatched", "Batched")] + [
        (f"Ray Serve {n.lower()}", r) for n, r in ray.items()]
    for label, per in rows:
        for c, r in per.items():
            print(f"{label:<26}{c:>6}{r['rps']:>9.0f}{r['p50']:>9.2f}{r['p99']:>9.2f}"
                  f"{r['non2xx']:>8.0f}")
            figures[f"{label}, {c} connections: requests/s"] = Figure(
                [r["rps"]], "rps", lower_is_better=False, headline=c == 16 or c == 64)
            for pct in ("p50", "p99"):
                figures[f"{label}, {c} connections: {pct}"] = Figure([r[pct]], "ms",
                                                                     headline=False)
    share = ours["Unbatched"][16]["rps"] / base[16]["rps"]
    batched = ours["Batched"][64]["rps"] / base[64]["rps"]
    one, piped = ours["OneProcess"][1], ours["Ingress"][1]
    hop50, hop99 = piped["p50"] - one["p50"], piped["p99"] - one["p99"]
    print(f"unbatched / baseline at 16: {share:.2f}x (goal >= 0.85)")
    print(f"@batch / baseline at 64: {batched:.2f}x (goal >= 2)")
    print(f"pipeline hop: p50 +{hop50:.2f} ms (goal <= 1), p99 +{hop99:.2f} ms "
          f"(one process p50 {one['p50']:.2f} ms, through a handle {piped['p50']:.2f} ms)")
    figures.update({
        "unbatched / baseline, 16 connections": Figure([share], "x", lower_is_better=False,
                                                       goal=">= 0.85"),
        "@batch / baseline, 64 connections": Figure([batched], "x", lower_is_better=False,
                                                    goal=">= 2"),
        "pipeline hop: p50": Figure([hop50], "ms", goal="<= 1"),
        "pipeline hop: p99": Figure([hop99], "ms"),
    })
    emit(figures)


if __name__ == "__main__":
    main()
