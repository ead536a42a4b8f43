"""Prefix affinity against power of two choices, for a language model's turns.

    .venv/bin/python bench/llm_affinity.py [--conversations 30] [--turns 5]

servefleet.llm serves NGramEngine with a prefix cache (bench/llm_cache_engine.py:
as vLLM's, it remembers the prompt blocks it processed) on 3 replicas. 30
conversations of 5 turns each go through the OpenAI chat API, 8 at a time,
each turn's messages the conversation so far. Twice: the model's deployment
routed by power of two choices, then by `request_router: prefix_affinity`.
Figure: the share of turns after a conversation's first whose prompt found
its earlier part in the cache of the replica that served it (the replicas'
own counts, read from their /metrics). Goal (issue 36): none stated; the
issue asks for the share under each router.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
from pathlib import Path

import httpx
from figures import Figure, emit
from llm_cluster import LLMCluster

HERE = Path(__file__).resolve().parent
MODEL = "kjv-trigram"


def converse(url: str, conversations: int, turns: int) -> None:
    def talk(c: int) -> None:
        messages = [{"role": "user", "content": f"Pilgrim {c} asks: who built the ark, and "
                                                f"why, and what came of it for all flesh?"}]
        with httpx.Client(timeout=60) as http:
            for turn in range(turns):
                answer = http.post(url + "/v1/chat/completions", json={
                    "model": MODEL, "messages": messages, "max_tokens": 24, "seed": c * 10
                    + turn}).raise_for_status().json()
                messages += [answer["choices"][0]["message"],
                             {"role": "user", "content": f"And then, for turn {turn}?"}]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(talk, range(conversations)))


def cache_counts(cluster: LLMCluster) -> tuple[float, float]:
    """Turns looked up and turns that hit, summed over the model's replicas."""
    turns = hits = 0.0
    for replica in cluster.client.replicas():
        address = replica.record.metrics_address
        if not address or not replica.record.deployment.startswith("LLMServer"):
            continue
        text = httpx.get(f"http://{address}/metrics", timeout=10).text
        for name, value in re.findall(r"^(llm_prefix_cache_(?:hit_)?turns)_total\{[^}]*\} (\S+)",
                                      text, re.M):
            if name.endswith("hit_turns"):
                hits += float(value)
            else:
                turns += float(value)
    return turns, hits


def share(router: str, conversations: int, turns: int) -> float:
    configs = [{"model_id": MODEL, "engine": "llm_cache_engine:PrefixCachingEngine",
                "engine_kwargs": {"model_id": MODEL},
                "deployment_config": {"num_replicas": 3, "request_router": router}}]
    with LLMCluster(configs, working_dir=str(HERE)) as cluster:
        probe = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                 "max_tokens": 1}
        for _ in range(600):
            try:
                if httpx.post(cluster.url + "/v1/chat/completions", json=probe,
                              timeout=10).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
        before = cache_counts(cluster)
        converse(cluster.url, conversations, turns)
        after = cache_counts(cluster)
    looked, hit = after[0] - before[0], after[1] - before[1]
    later = looked - conversations  # a conversation's first turn can hit nothing
    print(f"{router:<16} turns {looked:.0f}, hits {hit:.0f}: "
          f"{hit / later:.0%} of turns after the first")
    return hit / later


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    figures = {}
    for router in ("power_of_two", "prefix_affinity"):
        value = share(router, args.conversations, args.turns)
        figures[f"{router}: turns that hit their replica's prefix cache"] = Figure(
            [value * 100], "%", lower_is_better=False)
    emit(figures)


if __name__ == "__main__":
    main()
