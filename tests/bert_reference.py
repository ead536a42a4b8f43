"""A BERT sentence encoder in plain numpy, written from the model's definition
(not from servefleet's graph builder), to check the ONNX graph against.

One sequence at a time, no padding and no mask: each sentence is run alone
at its own length, so a bug in how the graph pads or masks a batch shows as
a difference. float64 throughout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class ReferenceBert:
    def __init__(self, weights: Mapping[str, np.ndarray], num_layers: int, num_heads: int,
                 eps: float = 1e-12) -> None:
        self.w = {k: v.astype(np.float64) for k, v in weights.items()}
        self.num_layers, self.num_heads, self.eps = num_layers, num_heads, eps

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return _layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"], self.eps)

    def hidden_states(self, ids: Sequence[int]) -> np.ndarray:
        w, n = self.w, len(ids)
        x = (w["embeddings.word_embeddings.weight"][list(ids)]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        for i in range(self.num_layers):
            p = f"encoder.layer.{i}"
            heads = []
            q = self._dense(x, f"{p}.attention.self.query")
            k = self._dense(x, f"{p}.attention.self.key")
            v = self._dense(x, f"{p}.attention.self.value")
            size = x.shape[1] // self.num_heads
            for h in range(self.num_heads):
                cut = slice(h * size, (h + 1) * size)
                scores = q[:, cut] @ k[:, cut].T / math.sqrt(size)
                heads.append(_softmax(scores) @ v[:, cut])
            attended = self._dense(np.concatenate(heads, axis=1), f"{p}.attention.output.dense")
            x = self._norm(attended + x, f"{p}.attention.output.LayerNorm")
            inner = _gelu(self._dense(x, f"{p}.intermediate.dense"))
            x = self._norm(self._dense(inner, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
        return x

    def sentence_vector(self, ids: Sequence[int]) -> np.ndarray:
        """Mean of the token states, scaled to length 1."""
        mean = self.hidden_states(ids).mean(axis=0)
        return mean / np.linalg.norm(mean)
