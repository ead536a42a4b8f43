"""Choosing the next token from a probability distribution over the vocabulary.

The OpenAI parameters, in vLLM's order: temperature first (0 means greedy:
the most likely token, the lowest id among equals), then top_p (nucleus
sampling: the smallest set of most likely tokens whose probability reaches
top_p, ties broken by the lower id as greedy does), then one draw with the
request's own `numpy.random.Generator`, so that a seed fixes the choice and no
request touches global random state.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Probabilities = npt.NDArray[np.float64]

# The first nucleus search looks at this many of the most likely tokens; a
# trigram context rarely spreads top_p over more, and each miss looks at four
# times as many (the whole vocabulary at worst).
_FIRST_NUCLEUS_CANDIDATES = 64


def choose_token(
    probs: Probabilities, temperature: float, top_p: float, rng: np.random.Generator
) -> int:
    """The id of the next token. `probs` is non-negative with a positive entry
    (it need not sum to 1) and is not modified. Raises ValueError for a negative
    temperature or a top_p outside (0, 1]."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, not {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], not {top_p}")
    if temperature == 0:
        return int(np.argmax(probs))
    # Scaled so the largest weight is 1: a low temperature cannot underflow all
    # of them to 0.
    weights = probs / probs.max()
    if temperature != 1:
        np.power(weights, 1.0 / temperature, out=weights)
    if top_p < 1:
        candidates = nucleus(weights, top_p)
        return int(candidates[_draw(weights[candidates], rng)])
    return _draw(weights, rng)


def nucleus(weights: Probabilities, top_p: float) -> npt.NDArray[np.intp]:
    """The ids of the smallest set of heaviest tokens holding `top_p` of the
    total weight, heaviest first (the lower id first among equals)."""
    target = top_p * float(weights.sum())
    size = len(weights)
    count = min(_FIRST_NUCLEUS_CANDIDATES, size)
    while True:
        threshold = np.partition(weights, size - count)[size - count]
        candidates = np.flatnonzero(weights >= threshold)
        candidates = candidates[np.lexsort((candidates, -weights[candidates]))]
        mass = np.cumsum(weights[candidates])
        if mass[-1] >= target or count == size:
            cut = int(np.searchsorted(mass, target, side="left")) + 1
            return candidates[: min(cut, len(candidates))]
        count = min(count * 4, size)


def _draw(weights: Probabilities, rng: np.random.Generator) -> int:
    """An index drawn with probability proportional to its weight."""
    cumulative = np.cumsum(weights)
    index = int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))
    return min(index, len(weights) - 1)
