"""Dynamic batching: a model that costs 20 ms per call + 1 ms per input, with
and without @batch(max_batch_size=16), 32 concurrent clients through a proxy.

    .venv/bin/python bench/batching.py [--duration 10]          (needs Debian's wrk)

One replica each (max_ongoing_requests 32), controller on sqlite, process
runtime; the model is bench/batch_model.py (one call at a time, like one
accelerator). The clients are wrk's 32 connections (Debian's wrk): an
httpx client in this process kept only 4-12 requests in flight at the
replica, and the figure measured the client. Prints requests/s, p50 and p99
for both, and the batched one's average batch size as the model saw it (from
the request rate and the per-call cost).
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import httpx
from figures import Figure, emit
from wrk_run import wrk

from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--clients", type=int, default=32)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="servefleet-batching-")
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work,
                                   extra_args=["--allow-working-dir", str(HERE)])
    proxy = None
    results = {}
    try:
        controller.start()
        while not controller.is_leader():
            time.sleep(0.05)
        with ControllerClient(controller.address) as client:
            for name in ("Unbatched", "Batched"):
                client.deploy(d.DeploymentSpec(
                    name=name, import_path=f"batch_model:{name}", route_prefix=f"/{name}",
                    runtime=d.RuntimeOptions(working_dir=str(HERE)),
                    replica_config=d.ReplicaConfig(num_replicas=1, max_ongoing_requests=32)))
        proxy = ProxyProcess([controller.address], log_dir=work).start()
        for name in ("Unbatched", "Batched"):
            url = f"{proxy.url}/{name}"
            deadline = time.monotonic() + 60
            while not _ok(url):
                if time.monotonic() > deadline:
                    raise SystemExit(f"{name} did not come up")
                time.sleep(0.2)
            results[name] = wrk(url + "?x=1", args.clients, int(args.duration))
    finally:
        if proxy is not None:
            proxy.stop()
        with contextlib.suppress(Exception), ControllerClient(controller.address,
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()
    plain, batched = results["Unbatched"], results["Batched"]
    print(f"batching: 20 ms per call + 1 ms per input, {args.clients} clients, "
          f"{args.duration:g}s each, one replica")
    for name, r in results.items():
        print(f"  {name:<10} {r['rps']:>7.0f} req/s  p50 {r['p50']:>6.1f} ms  "
              f"p99 {r['p99']:>6.1f} ms  errors {r['non2xx']:.0f}")
    # rate = size / (20 ms + size * 1 ms)  =>  size = rate * 20 ms / (1 - rate * 1 ms)
    rate = batched["rps"]
    size = rate * 0.020 / max(1e-9, 1 - rate * 0.001)
    print(f"  batched / unbatched: {rate / plain['rps']:.1f}x (about {size:.1f} inputs per "
          "model call)")
    emit({"@batch(max_batch_size=16): requests/s": Figure([rate], "rps", lower_is_better=False),
          "@batch: p99": Figure([batched["p99"]], "ms"),
          "unbatched: requests/s": Figure([plain["rps"]], "rps", lower_is_better=False),
          "batched / unbatched": Figure([rate / plain["rps"]], "x", lower_is_better=False)})


def _ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


if __name__ == "__main__":
    main()
