"""What bounding a request's time costs: asyncio.timeout against Deadlines.

    .venv/bin/python bench/deadlines.py [--requests 200000] [--rounds 3]

The proxy bounds each request it forwards and lifts the bound when the
answer begins (proxy/app.py). This runs that pattern alone, 16 tasks at a
time as wrk's 16 connections would, with no bound (the floor), with
`asyncio.timeout` (a timer handle per request) and with
servefleet/_private/edge/deadlines.py (one timer for all), alternating, and
prints the time per request of each, and the bound's cost above the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from servefleet._private.edge.deadlines import Deadlines

CONCURRENT = 16


async def per_request_us(kind: str, requests: int) -> float:
    deadlines = Deadlines()

    async def request() -> None:
        if kind == "asyncio.timeout":
            async with asyncio.timeout(60) as timeout:
                await asyncio.sleep(0)
                timeout.reschedule(None)
        elif kind == "Deadlines":
            async with deadlines.bound(60) as bound:
                await asyncio.sleep(0)
                bound.lift()
        else:
            await asyncio.sleep(0)

    began = time.perf_counter()
    for _ in range(requests // CONCURRENT):
        await asyncio.gather(*[request() for _ in range(CONCURRENT)])
    return (time.perf_counter() - began) / requests * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    kinds = ("no bound", "asyncio.timeout", "Deadlines")
    samples: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            samples[kind].append(asyncio.run(per_request_us(kind, args.requests)))
    floor = statistics.median(samples["no bound"])
    print(f"{'':16} {'us/request':>11} {'above the floor':>16}  (median of {args.rounds})")
    for kind in kinds:
        median = statistics.median(samples[kind])
        print(f"{kind:16} {median:11.2f} {median - floor:16.2f}")


if __name__ == "__main__":
    main()
