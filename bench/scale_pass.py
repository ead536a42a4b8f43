"""The replica reconciler's pass at scale, in one process: fake runtime, fake clock.

    .venv/bin/python bench/scale_pass.py [--deployments 1000] [--replicas 10] [--passes 200]

A real leader term (tests/fakes.py: in-memory store, fake runtime and
replica client) runs D deployments of R replicas each until settled; then
`--passes` passes run 0.1 s apart on the fake clock, as the loop runs them
while nothing changes. Printed: the CPU time each pass takes (process time,
so a busy machine slows it less than the wall clock), mean, p50 and p99.
Health checks fall due as in a real controller (10 s period): they are the
passes' only work. docs/scale.md has figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fakes import FakeControlPlane

from servefleet.v1 import deployment_pb2 as d


async def measure(deployments: int, replicas: int, passes: int) -> list[float]:
    world = FakeControlPlane()
    try:
        term = await world.lead()
        for i in range(deployments):
            await term.deployments.deploy(d.DeploymentSpec(
                name=f"d{i}", import_path="m:C",
                replica_config=d.ReplicaConfig(num_replicas=replicas)))
        await world.settle(term, ticks=20, step_s=0.1)
        took = []
        for _ in range(passes):
            world.clock.advance(0.1)
            began = time.process_time()
            await term.loop.run_pass()
            took.append(time.process_time() - began)
            await asyncio.sleep(0)
            await term.loop.wait_idle()
        return took
    finally:
        await world.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deployments", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--passes", type=int, default=200)
    args = parser.parse_args()
    took = sorted(asyncio.run(measure(args.deployments, args.replicas, args.passes)))
    p99 = took[min(len(took) - 1, int(0.99 * len(took)))]
    print(f"{args.deployments} deployments x {args.replicas} replicas, {len(took)} passes: "
          f"mean {1000 * statistics.mean(took):.2f} ms, p50 {1000 * took[len(took) // 2]:.2f} "
          f"ms, p99 {1000 * p99:.2f} ms")


if __name__ == "__main__":
    main()
