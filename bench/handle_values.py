"""One handle call carrying a 1 MB numpy array, beside one carrying a ~1 KB
JSON-like dict, on a real embedded servefleet (servefleet.run), and with
`--ray-python PATH` the same two on Ray Serve run by that interpreter.

    .venv/bin/python bench/handle_values.py [--calls 300] [--ray-python PATH]

Each call sends the value to an echo deployment (one replica) and gets it
back, awaited one after another from an asyncio driver, so the figure is
the latency of one call: the value pickled, sent, unpickled, returned the
same way. p50 and p99 over `--calls` calls after a warm-up. Prints a table,
then the figures for bench/run_all.py (BENCH-FIGURES).

With `--as-ray` this file is the Ray side: it imports only Ray (the Ray
interpreter has no servefleet), measures the same two calls and prints
them as one JSON line. Ray is never a dependency of servefleet; without
`--ray-python` that part is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

RAY_MARK = "RAY-HANDLE-VALUES "
WARMUP = 20


def json_like() -> dict[str, Any]:
    """About 1 KB as JSON: small strings, numbers and flags."""
    value = {f"field_{i:02d}": (f"value number {i}" if i % 3 == 0 else
                                i * 1.5 if i % 3 == 1 else i % 2 == 0) for i in range(48)}
    return value


def array() -> Any:
    import numpy as np

    return np.random.default_rng(0).random(1 << 18, dtype=np.float32)  # 1 MiB


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return (ordered[len(ordered) // 2],
            ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))])


async def measure(call: Callable[[Any], Any], value: Any, calls: int,
                  check: Callable[[Any], bool]) -> list[float]:
    """Milliseconds per call, one call at a time."""
    for _ in range(WARMUP):
        assert check(await call(value))
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call(value)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


class Echo:
    def __call__(self, value: Any) -> Any:
        return value


def on_servefleet(calls: int) -> dict[str, list[float]]:
    import numpy as np

    import servefleet

    big, small = array(), json_like()
    handle = servefleet.run(servefleet.deployment(name="Echo")(Echo).bind(), name="values",
                            http_port=0)
    try:
        async def main() -> dict[str, list[float]]:
            return {
                "1 MB array": await measure(handle.remote, big, calls,
                                            lambda got: np.array_equal(got, big)),
                "1 KB dict": await measure(handle.remote, small, calls,
                                           lambda got: got == small),
            }
        return asyncio.run(main())
    finally:
        servefleet.shutdown()


def on_ray(calls: int) -> dict[str, list[float]]:
    import numpy as np
    import ray  # type: ignore[import-not-found]
    from ray import serve  # type: ignore[import-not-found]

    big, small = array(), json_like()
    ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False)
    try:
        handle = serve.run(serve.deployment(Echo, name="Echo").bind(), name="values",
                           route_prefix=None)

        async def main() -> dict[str, list[float]]:
            return {
                "1 MB array": await measure(handle.remote, big, calls,
                                            lambda got: np.array_equal(got, big)),
                "1 KB dict": await measure(handle.remote, small, calls,
                                           lambda got: got == small),
            }
        return asyncio.run(main())
    finally:
        serve.shutdown()
        ray.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--ray-python", default="", metavar="PATH",
                        help="a Python with Ray Serve installed: measure the same on it")
    parser.add_argument("--as-ray", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_ray:
        print(RAY_MARK + json.dumps(on_ray(args.calls)), flush=True)
        return
    print(f"~1 KB value: {len(json.dumps(json_like()))} bytes as JSON", flush=True)
    results = {"servefleet": on_servefleet(args.calls)}
    if args.ray_python:
        out = subprocess.run([args.ray_python, __file__, "--as-ray", "--calls", str(args.calls)],
                             capture_output=True, text=True)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith(RAY_MARK)), None)
        if out.returncode != 0 or line is None:
            print(f"Ray Serve run failed (exit {out.returncode}):\n{out.stderr[-2000:]}",
                  file=sys.stderr)
        else:
            results["Ray Serve"] = json.loads(line[len(RAY_MARK):])
    else:
        print("(Ray Serve skipped: no --ray-python given)")
    print(f"\n{'system':<12} {'value':<12} {'p50 ms':>8} {'p99 ms':>8}   ({args.calls} calls)")
    for system, per_value in results.items():
        for value, samples in per_value.items():
            p50, p99 = quantiles(samples)
            print(f"{system:<12} {value:<12} {p50:>8.2f} {p99:>8.2f}")
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from figures import Figure, emit

    figures = {}
    for system, per_value in results.items():
        for value, samples in per_value.items():
            p50, p99 = quantiles(samples)
            figures[f"{system} handle call, {value}: p50"] = Figure([p50], "ms")
            figures[f"{system} handle call, {value}: p99"] = Figure([p99], "ms")
    emit(figures)


if __name__ == "__main__":
    main()
