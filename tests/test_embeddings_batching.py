"""EmbeddingServer's batching by token budget over the real all-MiniLM-L6-v2,
in process: concurrent requests' sequences share runs of the model, each
caller gets its own vectors (the same as unbatched, to float32 rounding),
batches keep the budget and pad little, and every run is recorded per model
on the metrics the dashboard reads."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
from prometheus_client import REGISTRY

from servefleet._private.configuration.options import OptionError
from servefleet._private.embeddings.batched import MAX_PADDING_SHARE
from servefleet._private.embeddings.config import embedding_config
from servefleet._private.embeddings.server import EmbeddingServer

WORDS = ("river bank money loan stream water fish boat market price the a of and to "
         "quickly slowly green house garden mountain").split()


def sentences(count: int, seed: int = 7) -> list[str]:
    """Texts of mixed lengths, 3 to 100 words."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 100)))
            for _ in range(count)]


def sample(name: str, model: str) -> float:
    labels = {"model": model, "application": "", "deployment": "", "replica": ""}
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(scope="module")
def servers() -> tuple[EmbeddingServer, EmbeddingServer]:
    return (EmbeddingServer("batched", max_batch_tokens=2048, batch_wait_timeout_s=0.01),
            EmbeddingServer("unbatched", max_batch_tokens=0))


async def test_concurrent_requests_share_runs_and_get_their_own_vectors(servers) -> None:
    batched, unbatched = servers
    texts = sentences(24)
    runs = sample("embedding_batches_total", "batched")
    answers = await asyncio.gather(*(batched.embed([t]) for t in texts))
    assert sample("embedding_batches_total", "batched") - runs < len(texts) / 2
    alone = await asyncio.gather(*(unbatched.embed([t]) for t in texts))
    assert sample("embedding_batches_total", "unbatched") >= len(texts)
    for text, got, expected in zip(texts, answers, alone, strict=True):
        assert got["vectors"].shape == (1, 384)
        np.testing.assert_allclose(got["vectors"], expected["vectors"], atol=1e-5)
        assert got["prompt_tokens"] == expected["prompt_tokens"] > 3, text


async def test_a_requests_many_inputs_come_back_in_order(servers) -> None:
    batched, unbatched = servers
    texts = sentences(9, seed=3)
    got, expected = await asyncio.gather(batched.embed(texts), unbatched.embed(texts))
    np.testing.assert_allclose(got["vectors"], expected["vectors"], atol=1e-5)
    reranked = await batched.rerank(texts[0], texts)
    assert max(range(len(texts)), key=lambda i: reranked["scores"][i]) == 0


async def test_batches_keep_the_budget_and_pad_little(servers) -> None:
    batched, _ = servers
    before = {name: sample(name, "batched") for name in (
        "embedding_batches_total", "embedding_inputs_total", "embedding_input_tokens_total",
        "embedding_padded_tokens_total", "embedding_queue_wait_seconds_count")}
    texts = sentences(64, seed=11)
    await asyncio.gather(*(batched.embed([t]) for t in texts))
    grew = {name: sample(name, "batched") - value for name, value in before.items()}
    assert grew["embedding_inputs_total"] == grew["embedding_queue_wait_seconds_count"] == 64
    # Sorted by length, batches of similar lengths: little padding, and yet
    # few runs (in arrival order, these texts of 3 to 100 words would pad
    # about half, or go in runs of one or two to pad less).
    padding = 1 - grew["embedding_input_tokens_total"] / grew["embedding_padded_tokens_total"]
    assert padding <= MAX_PADDING_SHARE, padding
    assert grew["embedding_batches_total"] <= 12, grew
    # No batch over the budget (the histogram's buckets: none above 2048).
    over = (REGISTRY.get_sample_value("embedding_batch_tokens_count", {
        "model": "batched", "application": "", "deployment": "", "replica": ""}) or 0) - (
        REGISTRY.get_sample_value("embedding_batch_tokens_bucket", {
            "model": "batched", "application": "", "deployment": "", "replica": "",
            "le": "2048.0"}) or 0)
    assert over == 0


def test_a_budget_below_the_longest_input_is_refused() -> None:
    with pytest.raises(ValueError, match=r"max_batch_tokens must be 0 .* at least the model's "
                                         r"longest input, 256 tokens; got 100"):
        EmbeddingServer("small", max_batch_tokens=100)
    with pytest.raises(OptionError, match=r"embedding_configs\[2\]: batch_wait_timeout_s"):
        embedding_config({"model_id": "m", "batch_wait_timeout_s": -1}, 2)
