"""Token-budget batching in front of a model's `embed` (issue 56, part 3).

Each sequence of each request waits in one queue per replica (servefleet's
`@batch`: batching.py, batch_queue.py); a batch is the oldest waiting
sequence and those nearest to it in length (`sort_key`), as many as keep
the batch's padded tokens, its sequences x its longest, within
`max_batch_tokens` and its padding within MAX_PADDING_SHARE of them
(`batch_size_fn`: a batch that would pad more measures as over any budget).
On a CPU a run costs about its padded tokens, whatever its size, so padding
is what batching must not add: a batch of 8- and 128-token sentences would
compute 128 tokens for each, and two runs cost less than one. A batch goes
when no waiting sequence fits any more, or when its oldest has waited
`batch_wait_timeout_s`. One batch runs at a time: ONNX Runtime's threads
already use every core, and sequences arriving while a batch runs gather
into the next one (so at low load nothing waits but the timeout, and under
load batches fill while the model runs).

Each run records its batch (embedding_metrics.py), and each sequence its
queue wait.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from servefleet._private.batching.batch import batch
from servefleet._private.embeddings import embedding_metrics as m

DEFAULT_MAX_BATCH_TOKENS = 8192
# 0: a batch goes as soon as the model is free. One batch runs at a time, and
# what arrives while it runs gathers into the next: waiting longer when the
# model is idle would only add latency (a lone request at low load).
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.0
# A batch pads at most this share of its tokens, or PADDING_SLACK tokens
# (short sentences of any lengths go together: padding them costs little).
MAX_PADDING_SHARE = 0.25
PADDING_SLACK = 64
# What a batch that would pad more measures: over any budget.
TOO_UNEVEN = sys.maxsize


@dataclass(eq=False)
class Pending:
    """One sequence waiting for its batch, and since when (perf_counter)."""

    ids: list[int]
    queued_at: float

    def __len__(self) -> int:
        return len(self.ids)


def padded_tokens(items: Sequence[Pending]) -> int:
    """What a batch computes: its sequences, each padded to the longest;
    TOO_UNEVEN when that would pad more than MAX_PADDING_SHARE of it (and
    more than PADDING_SLACK tokens)."""
    padded = len(items) * max(len(item) for item in items)
    padding = padded - sum(len(item) for item in items)
    if padding > PADDING_SLACK and padding > MAX_PADDING_SHARE * padded:
        return TOO_UNEVEN
    return padded


def check_settings(max_batch_tokens: Any, batch_wait_timeout_s: Any, max_tokens: int) -> None:
    """ValueError naming a setting out of range: a budget (when batching,
    not 0) must hold the model's longest input."""
    if isinstance(max_batch_tokens, bool) or not isinstance(max_batch_tokens, int) or (
            max_batch_tokens != 0 and max_batch_tokens < max_tokens):
        raise ValueError(f"max_batch_tokens must be 0 (no batching) or an integer of at least "
                         f"the model's longest input, {max_tokens} tokens; got "
                         f"{max_batch_tokens!r}")
    if isinstance(batch_wait_timeout_s, bool) or not isinstance(
            batch_wait_timeout_s, int | float) or not 0 <= batch_wait_timeout_s <= 10:
        raise ValueError(f"batch_wait_timeout_s must be a number of seconds from 0 to 10; "
                         f"got {batch_wait_timeout_s!r}")


class TokenBatcher:
    """`embed(sequences)` for `model`, batched with other callers' sequences."""

    def __init__(self, model: Any, model_id: str, max_batch_tokens: int,
                 batch_wait_timeout_s: float) -> None:
        check_settings(max_batch_tokens, batch_wait_timeout_s, model.max_tokens)
        self.model = model
        self.tags = {"model": model_id}
        self._run.set_max_batch_size(max_batch_tokens)
        self._run.set_batch_wait_timeout_s(batch_wait_timeout_s)

    @batch(max_batch_size=DEFAULT_MAX_BATCH_TOKENS,
           batch_wait_timeout_s=DEFAULT_BATCH_WAIT_TIMEOUT_S,
           batch_size_fn=padded_tokens, sort_key=len)
    async def _run(self, items: list[Pending]) -> np.ndarray:
        started = time.perf_counter()
        for item in items:
            m.QUEUE_WAIT.observe(started - item.queued_at, tags=self.tags)
        vectors = await asyncio.to_thread(self.model.embed, [item.ids for item in items])
        m.record_run(self.tags, [len(item) for item in items], time.perf_counter() - started)
        return vectors

    async def embed(self, sequences: Sequence[Sequence[int]]) -> np.ndarray:
        """[len(sequences), dimensions] vectors, each row from whichever batch
        its sequence went in."""
        now = time.perf_counter()
        if len(sequences) == 1:
            return (await self._run(Pending(list(sequences[0]), now)))[None, :]
        rows = await asyncio.gather(*(self._run(Pending(list(s), now)) for s in sequences))
        return np.stack(rows)
