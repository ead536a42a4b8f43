"""An interpolated n-gram language model over token ids (counts and probabilities).

Training counts every k-gram (k = 2..order) of the token sequence. A k-gram
is stored as one int64 key, its ids read as the digits of a base-V number
(V, the vocabulary size), so the counts of a table are one `numpy.unique`
over the sequence, and the continuations of a context are one contiguous run
of the sorted keys (`searchsorted` on key // V).

The next-token distribution is Witten-Bell interpolation, computed over the
whole vocabulary at every step: start from the unigram distribution, then
for each longer context h seen in training, with c(h) tokens after it of
T(h) distinct kinds,

    p(w | h) = (c(h, w) + T(h) * p(w | shorter h)) / (c(h) + T(h)).

An unseen context (say, one holding a prompt word outside the vocabulary)
leaves the shorter context's distribution as it is: that is the backoff.
Every token seen in training keeps a positive probability; UNKNOWN, never
seen, has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from servefleet._private.llm.sampling import Probabilities

MAX_ORDER = 4


@dataclass(frozen=True)
class _ContextTable:
    """The k-grams of one order k, sorted by key."""

    contexts: npt.NDArray[np.int64]  # key // V: the first k-1 ids as one number
    next_ids: npt.NDArray[np.int64]  # key % V: the last id
    counts: npt.NDArray[np.float64]


class NGramModel:
    """Counts of a token sequence up to `order`, and the distributions they give."""

    def __init__(self, sequence: Sequence[int], vocab_size: int, order: int) -> None:
        """Counts `sequence` (ids below `vocab_size`). Raises ValueError for an
        order outside 1..MAX_ORDER, or a vocabulary too large for an order's
        keys to fit in 64 bits, or an empty sequence."""
        if not 1 <= order <= MAX_ORDER:
            raise ValueError(f"order must be 1 to {MAX_ORDER}, not {order}")
        if vocab_size**order >= 2**63:
            raise ValueError(f"a vocabulary of {vocab_size} is too large for order {order}")
        if not sequence:
            raise ValueError("cannot train on an empty token sequence")
        self.order = order
        self.vocab_size = vocab_size
        ids = np.asarray(sequence, dtype=np.int64)
        unigram = np.bincount(ids, minlength=vocab_size).astype(np.float64)
        self._unigram: Probabilities = unigram / unigram.sum()
        self._tables = [self._count(ids, k) for k in range(2, order + 1)]

    def _count(self, ids: npt.NDArray[np.int64], k: int) -> _ContextTable:
        n = len(ids) - k + 1
        keys = np.zeros(max(n, 0), dtype=np.int64)
        for j in range(k):
            keys = keys * self.vocab_size + ids[j : j + n]
        keys, counts = np.unique(keys, return_counts=True)
        return _ContextTable(
            contexts=keys // self.vocab_size,
            next_ids=keys % self.vocab_size,
            counts=counts.astype(np.float64),
        )

    def distribution(self, context: Sequence[int]) -> Probabilities:
        """P(next token | the last order-1 ids of `context`), a new array over the
        whole vocabulary summing to 1. `context` holds vocabulary ids (UNKNOWN
        included: it backs off); a shorter context uses the orders it can."""
        probs = self._unigram.copy()
        for k, table in enumerate(self._tables, start=2):
            if len(context) < k - 1:
                break
            key = 0
            for token_id in context[len(context) - (k - 1) :]:
                key = key * self.vocab_size + token_id
            lo, hi = np.searchsorted(table.contexts, (key, key + 1))
            if lo == hi:
                continue  # an unseen context: keep the shorter one's distribution
            seen = table.counts[lo:hi]
            kinds = float(hi - lo)
            total = float(seen.sum()) + kinds
            probs *= kinds / total
            probs[table.next_ids[lo:hi]] += seen / total
        return probs
