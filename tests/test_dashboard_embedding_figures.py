"""The dashboard's figures of an embedding model (model_figures.py over the
embedding_* metrics an EmbeddingServer replica records): batch size, padded
tokens per batch, padding share, queue wait and inputs per second, summed
across replicas over the window; without processes."""

from __future__ import annotations

import pytest

from servefleet.controller.api.model_figures import ModelFigures
from servefleet.controller.api.model_scrape import read_models

BOUNDS = ("0.001", "0.01", "0.1", "+Inf")


def exposition(batches: float, inputs: float, tokens: float, padded: float,
               waits: list[int], model: str = "minilm") -> str:
    """A replica's /metrics as prometheus_client writes the embedding_* families."""
    tags = f'application="emb",deployment="EmbeddingServer_minilm",model="{model}",replica="r"'
    lines = ["# TYPE embedding_batches_total counter",
             f"embedding_batches_total{{{tags}}} {batches}",
             f"embedding_inputs_total{{{tags}}} {inputs}",
             f"embedding_input_tokens_total{{{tags}}} {tokens}",
             f"embedding_padded_tokens_total{{{tags}}} {padded}"]
    for bound, n in zip(BOUNDS, waits, strict=True):
        lines.append(f'embedding_queue_wait_seconds_bucket{{{tags},le="{bound}"}} {float(n)}')
    lines.append(f"embedding_queue_wait_seconds_count{{{tags}}} {float(waits[-1])}")
    return "\n".join(lines) + "\n"


def test_an_embedding_models_batches_over_the_window_across_replicas() -> None:
    figures = ModelFigures(window_s=10.0)
    start = read_models(exposition(0, 0, 0, 0, [0, 0, 0, 0]))
    figures.record("r1", "emb", "Dep", 0.0, start)
    figures.record("r2", "emb", "Dep", 0.0, start)
    # r1: 10 batches of 8 inputs in 2 s (600 tokens padded to 800), every
    # input waiting under 1 ms; r2: 5 batches of 16 in 4 s (1,000 tokens of
    # 1,000: no padding), every input waiting 1 to 10 ms.
    figures.record("r1", "emb", "Dep", 2.0, read_models(
        exposition(10, 80, 600, 800, [80, 80, 80, 80])))
    figures.record("r2", "emb", "Dep", 4.0, read_models(
        exposition(5, 80, 1000, 1000, [0, 80, 80, 80])))
    figures.compute()
    (model,) = figures.of("emb", "Dep")
    assert model["kind"] == "embedding" and model["model"] == "minilm"
    assert model["replicas"] == 2 and model["window_s"] == 4.0
    assert model["inputs_per_s"] == pytest.approx(80 / 2 + 80 / 4)
    # Rates: 5 + 1.25 batches/s, 40 + 20 inputs/s, 300 + 250 tokens/s, 400 + 250 padded/s.
    assert model["batch_size_mean"] == pytest.approx(60 / 6.25, abs=1e-3)
    assert model["batch_tokens_mean"] == pytest.approx(650 / 6.25, abs=1e-3)
    assert model["padding_share"] == pytest.approx(1 - 550 / 650, abs=1e-3)
    assert model["queue_wait_p50_ms"] == pytest.approx(1.0)  # rank 80 of 160: the top of [0, 1]
    assert model["queue_wait_p99_ms"] == pytest.approx(1 + 9 * 78.4 / 80)
    assert "ttft_p50_ms" not in model


def test_no_batch_in_the_window_gives_no_means() -> None:
    figures = ModelFigures()
    sample = read_models(exposition(3, 3, 30, 30, [3, 3, 3, 3]))
    figures.record("r1", "emb", "Dep", 0.0, sample)
    figures.record("r1", "emb", "Dep", 5.0, sample)
    figures.compute()
    (model,) = figures.of("emb", "Dep")
    assert model["batch_size_mean"] is None and model["padding_share"] is None
    assert model["inputs_per_s"] == 0.0 and model["queue_wait_p50_ms"] is None
