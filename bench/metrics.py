"""How long a /metrics scrape takes at 1,000 deployments.

    .venv/bin/python bench/metrics.py [--deployments 1000]

A controller (`--runtime none`, sqlite) with --metrics-listen holds N
deployments; a proxy has routed one request to each (answered 503: nothing
runs them), so it carries a request series and a latency histogram per
deployment. Prints the size and the p50/max time of 20 scrapes of the
controller's /metrics, its /-/metrics-targets, and the proxy's /-/metrics,
beside the same scrapes with no deployments.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import httpx
from figures import Figure, emit

from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d


def timed(url: str, n: int = 20) -> tuple[float, float, int]:
    times, size = [], 0
    with httpx.Client(timeout=30) as http:
        for _ in range(n):
            began = time.perf_counter()
            reply = http.get(url)
            times.append(time.perf_counter() - began)
            reply.raise_for_status()
            size = len(reply.content)
    return statistics.median(times) * 1e3, max(times) * 1e3, size


def measure(urls: dict[str, str]) -> dict[str, tuple[float, float, int]]:
    return {label: timed(url) for label, url in urls.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=1000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="servefleet-metrics-")
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{work}/state.db", runtime="none", log_dir=work,
                                   extra_args=["--metrics-listen", http]).start()
    proxy = ProxyProcess([controller.address], log_dir=work).start()
    urls = {"controller /metrics": f"http://{http}/metrics",
            "controller /-/metrics-targets": f"http://{http}/-/metrics-targets",
            "proxy /-/metrics": proxy.url + "/-/metrics"}
    try:
        with ControllerClient(controller.address, timeout=60) as client:
            client.status()
            empty = measure(urls)
            for i in range(args.deployments):
                client.deploy(d.DeploymentSpec(
                    name=f"D{i}", import_path="m:app", route_prefix=f"/d{i}",
                    # Nothing runs them: refuse at once instead of queueing.
                    replica_config=d.ReplicaConfig(max_queued_requests=0)))
            with httpx.Client(timeout=10) as http_client:
                deadline = time.monotonic() + 60
                while len(http_client.get(proxy.url + "/-/routes").json()) < args.deployments:
                    if time.monotonic() > deadline:
                        raise TimeoutError("routes did not reach the proxy")
                    time.sleep(0.2)
                for i in range(args.deployments):
                    http_client.get(f"{proxy.url}/d{i}")
            full = measure(urls)
            client.shutdown()
    finally:
        proxy.stop()
        controller.stop()
    print(f"servefleet /metrics scrapes, {args.deployments} deployments vs none "
          "(20 scrapes each; p50 / max, size)")
    for label in urls:
        (p50, worst, size), (e50, eworst, esize) = full[label], empty[label]
        print(f"  {label:<32}{p50:>7.1f} ms /{worst:>6.1f} ms {size / 1024:>7.0f} KB"
              f"   none: {e50:.1f} ms / {eworst:.1f} ms, {esize / 1024:.0f} KB")
    emit({f"scrape of {label}, {args.deployments} deployments: p50": Figure([full[label][0]], "ms")
          for label in urls})


if __name__ == "__main__":
    main()
