"""Model multiplexing: model loads per 1,000 requests over 8 models, 4 replicas
holding 2 each, with model-aware routing vs without.

    .venv/bin/python bench/multiplexing.py [--requests 1000] [--runs 5]

The routing and the LRU are servefleet's own code (servefleet/_private/dataplane/
balancer.py, servefleet/_private/batching/multiplex.py), run in this one process: replicas
are LRUs of models behind a ReplicaPool, 8 requests in flight at a time,
each model id drawn uniformly, and every answer tells the router what its
replica holds (as `x-servefleet-models` does). No HTTP: the figure is about
where requests go, not how fast. "Without" is the pool's power of two
choices, blind to models (what routing without model ids does).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics

from figures import Figure, emit

from servefleet._private.batching.multiplex import _ModelCache
from servefleet._private.dataplane.balancer import ReplicaPool


async def simulate(requests: int, model_aware: bool, seed: int, models: int = 8,
                   replicas: int = 4, per_replica: int = 2, in_flight: int = 8) -> int:
    rng = random.Random(seed)
    loads = 0

    async def load(model_id: str) -> str:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0)
        return model_id

    caches = {f"r{i}": _ModelCache(load, per_replica) for i in range(replicas)}
    pool = ReplicaPool()
    pool.update([(rid, f"h:{i}") for i, rid in enumerate(caches)], max_ongoing=4,
                max_queued=-1)
    gate = asyncio.Semaphore(in_flight)

    async def one(model_id: str) -> None:
        async with gate:
            replica = await pool.acquire(model_id=model_id if model_aware else "")
            try:
                await caches[replica.replica_id].get(model_id)
                await asyncio.sleep(0)
                held = ",".join(caches[replica.replica_id].models).encode()
                pool.note_models(replica, held)
            finally:
                pool.release(replica)

    await asyncio.gather(*[one(f"m{rng.randrange(models)}") for _ in range(requests)])
    return loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    aware = [asyncio.run(simulate(args.requests, True, s)) for s in range(args.runs)]
    blind = [asyncio.run(simulate(args.requests, False, s)) for s in range(args.runs)]
    print(f"multiplexing: loads per {args.requests} requests, 8 models, 4 replicas x 2, "
          f"{args.runs} runs")
    print(f"  model-aware routing: median {statistics.median(aware):.0f} "
          f"(min {min(aware)}, max {max(aware)}; the minimum possible is 8)")
    print(f"  without:             median {statistics.median(blind):.0f} "
          f"(min {min(blind)}, max {max(blind)})")
    emit({f"model loads per {args.requests} requests, model-aware routing": Figure(
              [float(a) for a in aware], "loads"),
          "the same, model-blind (power of two choices)": Figure([float(b) for b in blind],
                                                                "loads")})


if __name__ == "__main__":
    main()
