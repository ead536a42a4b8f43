"""wrk runs for the benchmarks: one run's requests/s, p50, p99 and non-2xx
answers, and a run while /-/metrics is scraped beside it."""

from __future__ import annotations

import re
import subprocess
import threading
import time

import httpx

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(url: str, connections: int, duration: int) -> dict[str, float]:
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{duration}s",
                          "--latency", url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    found = {}
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        found[pct] = float(m.group(1)) * UNITS[m.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": rps, "seconds": duration, "p50": found["50"], "p99": found["99"],
            "non2xx": float(errors.group(1)) if errors else 0.0}


def scraped(base: str, duration: int, path: str) -> dict[str, float]:
    """wrk at 16 connections while another thread GETs /-/metrics every 100 ms."""
    stop = threading.Event()
    times: list[float] = []

    def scrape() -> None:
        with httpx.Client(timeout=5) as http:
            while not stop.wait(0.1):
                began = time.perf_counter()
                http.get(base + "/-/metrics").raise_for_status()
                times.append(time.perf_counter() - began)

    scraper = threading.Thread(target=scrape)
    scraper.start()
    try:
        result = wrk(base + path, 16, duration)
    finally:
        stop.set()
        scraper.join()
    return {**result, "scrapes": float(len(times)),
            "scrape_ms": 1e3 * sum(times) / max(1, len(times))}
