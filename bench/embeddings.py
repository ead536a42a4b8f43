"""A transformer served on CPU: all-MiniLM-L6-v2 (ONNX Runtime), POST /v1/embeddings.

    .venv/bin/python bench/embeddings.py [--duration 5] [--ray-python PATH]
                                          [--bentoml-python PATH] [--no-peers]   (needs wrk)

One sentence a request, OpenAI's body with base64 vectors (what the openai
client asks for), sentences of 8 to 128 word pieces in turn
(bench/embeddings_load.py); 1, 16 and 64 connections; each system alone on
the machine, one replica (one process) of the model:

- ceiling: the same model by hand in one plain uvicorn + starlette process
  (bench/embeddings_app.py): servefleet's SentenceEncoder and, batched, the
  same token-budget batcher an EmbeddingServer replica runs; and unbatched;
- servefleet: `build_openai_app` with one embedding model, through the proxy
  (proxy -> OpenAI ingress -> handle -> EmbeddingServer replica), with
  token-budget batching (max_batch_tokens 8192) and without (0);
- Ray Serve 2.60 and BentoML 1.4 in venvs of their own (bench/embeddings_peers.py
  --setup makes them; --ray-python, --bentoml-python name others) with the
  same model code (bench/embeddings_model.py) and their own batching
  (@serve.batch; @bentoml.api(batchable=True)), at most 32 a batch.

Then where one request's time goes, in process: tokenize, pad, the model's
run (its graph pools and normalizes too: a numpy equivalent of those last
steps is timed apart), serialize (base64 and JSON; the handle's pickle);
then, at 1 connection, the ceiling's own serving (its p50 beyond those
steps added: HTTP, the event loop) and servefleet's hops (its p50 above the
batched ceiling's).
Goals (issue 56): batched >= 2x unbatched at 64 connections; >= 0.9x the
ceiling at 64; p50 at 1 connection <= the ceiling's + 1 ms; ahead of Ray
Serve and BentoML at every count.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from embeddings_load import MODEL, EmbeddingsCluster, body, ready, sentences, wrk_post
from embeddings_peers import bentoml_peer, ray_peer, venv_python
from figures import Figure, emit

from servefleet._private.embeddings.encoder import SentenceEncoder
from servefleet._private.embeddings.model_files import TOKENIZER, package_model_dir
from servefleet._private.testing import free_port

HERE = Path(__file__).resolve().parent
CONNECTIONS = (1, 16, 64)
PATH = "/v1/embeddings"
Results = dict[int, dict[str, float]]
# The steps of one request alone in the ceiling's process, from `breakdown`
# (pooling is inside the run; the handle's pickle is servefleet's hop).
ALONE = ("tokenize", "pad", "run, alone", "serialize: base64 and JSON")


def sweep(url: str, bodies: list[str], duration: float, stats_url: str = "",
          stats: dict | None = None) -> Results:
    """Each count after the one before has drained: the requests wrk left
    unanswered when it stopped are cancelled, yet a batch that runs them
    finishes; one answer after a pause says the model is free again. With
    `stats_url`, `stats` gets what its batches counted at 64 connections."""
    results: Results = {}
    for connections in (16, *CONNECTIONS):  # the first: warm, every length once
        time.sleep(2)
        ready(url, bodies[0])
        before = httpx.get(stats_url, timeout=10).json() if stats_url else {}
        results[connections] = wrk_post(url, bodies, connections,
                                        1 if not results else duration)
        if stats_url and stats is not None and connections == 64:
            after = httpx.get(stats_url, timeout=10).json()
            stats.update({k: after[k] - before[k] for k in after})
    return {c: results[c] for c in CONNECTIONS}


def ceiling(batched: bool, texts: list[str], duration: float) -> tuple[Results, dict]:
    port = free_port()
    env = {**os.environ, "EMBEDDINGS_BATCHED": "1" if batched else "0"}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "embeddings_app:app", "--port",
                             str(port), "--log-level", "warning", "--loop", "uvloop", "--http",
                             "httptools"], cwd=HERE, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        ready(base + PATH, body(texts[0]))
        stats: dict = {}
        results = sweep(base + PATH, [body(t) for t in texts], duration, base + "/stats", stats)
        return results, stats
    finally:
        proc.terminate()
        proc.wait(30)


def servefleet(texts: list[str], duration: float) -> dict[str, Results]:
    variants: dict[str, dict[str, Any]] = {"/batched": {"max_batch_tokens": 8192},
                                           "/unbatched": {"max_batch_tokens": 0}}
    for config in variants.values():
        config["deployment_config"] = {"max_ongoing_requests": 128}
    with EmbeddingsCluster(variants) as cluster:
        for prefix in variants:
            ready(cluster.proxy.url + prefix + PATH, body(texts[0]))
        return {prefix.strip("/"): sweep(cluster.proxy.url + prefix + PATH,
                                         [body(t) for t in texts], duration)
                for prefix in variants}


def peer_env(encoder: SentenceEncoder) -> dict[str, str]:
    return {**os.environ, "EMBEDDINGS_ONNX": str(encoder.onnx_path),
            "EMBEDDINGS_TOKENIZER": str(package_model_dir() / TOKENIZER),
            "PYTHONPATH": str(HERE)}


def on_peer(command: list[str], env: dict[str, str], texts: list[str], duration: float,
            bodies: list[str], path: str) -> Results:
    """A peer's server (the command prints "READY <port>" when it answers)."""
    proc = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise SystemExit(f"{command[1]} did not start: {line!r}")
        return sweep(f"http://127.0.0.1:{line.split()[1]}{path}", bodies, duration)
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)


def median_ms(fn: Any, items: list[Any]) -> float:
    times = []
    for item in items:
        started = time.perf_counter()
        fn(item)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def breakdown(encoder: SentenceEncoder, texts: list[str]) -> dict[str, float]:
    """Where one request's time goes in the model's process, each step alone
    (medians over the sentences, in ms)."""
    from embeddings_model import answer

    ids = [encoder.tokenize([t])[0] for t in texts]
    vectors = encoder.embed(ids[:1])

    def pad(seq: list[int]) -> None:
        a = np.full((1, len(seq)), encoder.pad_id, dtype=np.int64)
        m = np.zeros((1, len(seq)), dtype=np.int64)
        a[0, :len(seq)] = seq
        m[0, :len(seq)] = 1

    def pool(seq: list[int]) -> None:  # what the graph's last steps do, in numpy
        hidden = np.ones((1, len(seq), encoder.dimensions), dtype=np.float32)
        pooled = hidden.mean(axis=1)
        pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    by_length = sorted(ids, key=len)
    batches = [by_length[i:i + 16] for i in range(0, len(by_length), 16)]
    batched_run = sum(median_ms(encoder.embed, [b] * 3) for b in batches) / len(ids)
    return {"tokenize": median_ms(lambda t: encoder.tokenize([t]), texts),
            "pad": median_ms(pad, ids),
            "run, alone": median_ms(lambda s: encoder.embed([s]), ids),
            "run, in a batch of 16 similar lengths (per sentence)": batched_run,
            "pool and normalize (numpy equivalent, inside the run)": median_ms(pool, ids),
            "serialize: base64 and JSON": median_ms(
                lambda v: json.dumps(answer(v[None, :], 30)), list(vectors) * len(ids)),
            "serialize: the handle's pickle, both ways": median_ms(
                lambda v: pickle.loads(pickle.dumps({"vectors": v[None, :]})),
                list(vectors) * len(ids))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--ray-python", default=venv_python("ray"), metavar="PATH",
                        help="default: .build/bench-ray's, when it exists")
    parser.add_argument("--bentoml-python", default=venv_python("bentoml"), metavar="PATH",
                        help="default: .build/bench-bentoml's, when it exists")
    parser.add_argument("--no-peers", action="store_true")
    args = parser.parse_args()
    if args.no_peers:
        args.ray_python = args.bentoml_python = ""
    # Started from bench/: a path given from elsewhere, made absolute here.
    for name in ("ray_python", "bentoml_python"):
        if getattr(args, name) and os.sep in getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    encoder = SentenceEncoder()
    texts = sentences(encoder.tokenize)
    lengths = [len(s) for s in encoder.tokenize(texts)]
    rows: dict[str, Results] = {}
    rows["ceiling, batched"], stats = ceiling(True, texts, args.duration)
    rows["ceiling, unbatched"], _ = ceiling(False, texts, args.duration)
    ours = servefleet(texts, args.duration)
    rows["servefleet, batched"], rows["servefleet, unbatched"] = ours["batched"], ours["unbatched"]
    if args.ray_python:
        rows["Ray Serve, @serve.batch"] = on_peer(*ray_peer(args.ray_python, peer_env(encoder)),
                                                  texts, args.duration,
                                                  [body(t) for t in texts], PATH)
    if args.bentoml_python:
        command, env, bodies, path = bentoml_peer(args.bentoml_python, peer_env(encoder), texts)
        rows["BentoML, batchable"] = on_peer(command, env, texts, args.duration, bodies, path)
    report(rows, stats, breakdown(encoder, texts), lengths, args.duration)


def report(rows: dict[str, Results], stats: dict, steps: dict[str, float], lengths: list[int],
           duration: float) -> None:
    figures: dict[str, Figure] = {}
    print(f"{MODEL} (ONNX Runtime), one sentence a request ({len(lengths)} sentences of "
          f"{min(lengths)}-{max(lengths)} word pieces, mean {statistics.mean(lengths):.0f}), "
          f"{duration:g}s per point")
    print(f"{'system':<28}{'conns':>6}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    for label, per in rows.items():
        for c, r in per.items():
            print(f"{label:<28}{c:>6}{r['rps']:>9.1f}{r['p50']:>9.2f}{r['p99']:>9.2f}"
                  f"{r['non2xx'] + r['errors']:>8.0f}")
            figures[f"{label}, {c} connections: requests/s"] = Figure(
                [r["rps"]], "rps", lower_is_better=False, headline=c == 64)
            figures[f"{label}, {c} connections: p50"] = Figure([r["p50"]], "ms",
                                                               headline=c == 1)
            figures[f"{label}, {c} connections: p99"] = Figure([r["p99"]], "ms", headline=False)
    if stats.get("batches"):
        print(f"ceiling's batches at 64: {stats['inputs'] / stats['batches']:.1f} sentences, "
              f"{stats['padded_tokens'] / stats['batches']:.0f} padded tokens a batch, "
              f"padding {1 - stats['input_tokens'] / stats['padded_tokens']:.1%}")
    print("where a request's time goes, in the model's process (median ms, each step alone):")
    for step, ms in steps.items():
        print(f"  {step:<56}{ms:>8.3f}")
        figures[f"time: {step}"] = Figure([ms], "ms", headline=False)
    ours, theirs = rows["servefleet, batched"], rows["ceiling, batched"]
    # One request at 1 connection, whole: its steps, the ceiling's own
    # serving (its p50 beyond them: HTTP, the event loop, the batcher's
    # hand-off) and servefleet's hops (its p50 beyond the ceiling's).
    inside = sum(steps[step] for step in ALONE)
    serving = theirs[1]["p50"] - inside
    hop = ours[1]["p50"] - theirs[1]["p50"]
    for step, ms in (("the steps added: tokenize, pad, run alone, base64+JSON", inside),
                     ("serving: the ceiling's p50 beyond them, 1 connection", serving),
                     ("hops: servefleet p50 above the ceiling, 1 connection", hop)):
        print(f"  {step:<56}{ms:>8.3f}")
    figures["time: serving in the ceiling, beyond the steps"] = Figure([serving], "ms",
                                                                       headline=False)
    gain = ours[64]["rps"] / rows["servefleet, unbatched"][64]["rps"]
    share = ours[64]["rps"] / theirs[64]["rps"]
    print(f"batched / unbatched at 64: {gain:.2f}x (goal >= 2); batched / ceiling at 64: "
          f"{share:.2f}x (goal >= 0.9); p50 at 1 above the ceiling: {hop:+.2f} ms (goal <= 1)")
    figures.update({
        "servefleet batched / unbatched, 64 connections": Figure(
            [gain], "x", lower_is_better=False, goal=">= 2"),
        "servefleet batched / ceiling, 64 connections": Figure(
            [share], "x", lower_is_better=False, goal=">= 0.9"),
        "servefleet p50 above the ceiling, 1 connection": Figure([hop], "ms", goal="<= 1")})
    for peer in [label for label in rows if label.startswith(("Ray", "BentoML"))]:
        ratios = {c: ours[c]["rps"] / rows[peer][c]["rps"] for c in CONNECTIONS}
        print(f"servefleet batched / {peer}: " + ", ".join(
            f"{r:.2f}x at {c}" for c, r in ratios.items()) + " (goal >= 1 at every count)")
        figures[f"servefleet batched / {peer.split(',')[0]}, least of 1, 16, 64 connections"] = \
            Figure([min(ratios.values())], "x", lower_is_better=False, goal=">= 1")
    emit(figures)


if __name__ == "__main__":
    main()
