"""Deploy -> RUNNING on the Docker and Swarm runtimes, next to the process runtime, in one run.

    .venv/bin/python bench/containers.py [--runs 3]     (needs a Docker engine and
                                                          the image of scripts/docker-image)

For 1 and 8 replicas of a trivial class: the time from the Deploy RPC until
the deployment is HEALTHY with all replicas RUNNING, p50 and max over the
runs, with `--runtime process`, then `--runtime docker` (host network, code
bind-mounted), then `--runtime swarm` (one service per replica, the same
image and mounts) on a single-node swarm (initialised for the run and left
afterwards when the engine was in none), each controller on its own fresh etcd.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import time
from collections.abc import Iterator

from figures import Figure, emit
from replicas import echo, row, wait_healthy

from servefleet._private.external_servers import EtcdServer
from servefleet._private.testing import ControllerProcess
from servefleet.client import ControllerClient

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


@contextlib.contextmanager
def single_node_swarm() -> Iterator[None]:
    state = subprocess.run(["docker", "info", "-f", "{{.Swarm.LocalNodeState}}"],
                           capture_output=True, text=True, check=True).stdout.strip()
    if state != "active":
        subprocess.run(["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"],
                       capture_output=True, check=True)
    try:
        yield
    finally:
        if state != "active":
            subprocess.run(["docker", "swarm", "leave", "--force"], capture_output=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    process = measure("process", args.runs)
    docker = measure("docker", args.runs)
    with single_node_swarm():
        swarm = measure("swarm", args.runs)
    print(f"servefleet deploy -> all RUNNING, {args.runs} runs each")
    row("", "p50", "max")
    for count in COUNTS:
        for label, results in (("swarm runtime", swarm), ("docker runtime", docker),
                               ("process runtime", process)):
            samples = results[count]
            row(f"{count} replica(s), {label}", f"{statistics.median(samples):.2f} s",
                f"{max(samples):.2f} s")
    emit({f"deploy -> RUNNING, {count} replica{'s' if count > 1 else ''}, {label}": Figure(
        results[count], "s") for count in COUNTS
        for label, results in (("swarm", swarm), ("docker", docker))})


if __name__ == "__main__":
    main()
