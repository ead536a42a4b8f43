"""Deploy -> RUNNING on the Docker runtime, next to the process runtime, in one run.

    .venv/bin/python bench/containers.py [--runs 3]     (needs a Docker engine and
                                                          the image of scripts/docker-image)

For 1 and 8 replicas of a trivial class: the time from the Deploy RPC until
the deployment is HEALTHY with all replicas RUNNING, p50 and max over the
runs, first with `--runtime process`, then with `--runtime docker` (host
network, code bind-mounted), each controller on its own fresh etcd.
"""

from __future__ import annotations

import argparse
import statistics
import time

from replicas import echo, row, wait_healthy

from servefleet.client import ControllerClient
from servefleet.testing import ControllerProcess, EtcdServer

COUNTS = (1, 8)


def measure(runtime: str, runs: int) -> dict[int, list[float]]:
    etcd = EtcdServer().start()
    controller = ControllerProcess(etcd.url, cluster=f"bench-{runtime}", runtime=runtime).start()
    results: dict[int, list[float]] = {n: [] for n in COUNTS}
    try:
        with ControllerClient(controller.address) as client:
            for count in COUNTS:
                for i in range(runs):
                    version = f"{runtime}-{count}-{i}"
                    start = time.perf_counter()
                    client.deploy(echo(count, version))
                    wait_healthy(client, version)
                    results[count].append(time.perf_counter() - start)
                    client.delete(["Echo"])
                    while client.replicas():
                        time.sleep(0.05)
    finally:
        controller.stop()
        etcd.stop()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    process = measure("process", args.runs)
    docker = measure("docker", args.runs)
    print(f"servefleet deploy -> all RUNNING, {args.runs} runs each")
    row("", "p50", "max")
    for count in COUNTS:
        for label, results in (("docker runtime", docker), ("process runtime", process)):
            samples = results[count]
            row(f"{count} replica(s), {label}", f"{statistics.median(samples):.2f} s",
                f"{max(samples):.2f} s")


if __name__ == "__main__":
    main()
