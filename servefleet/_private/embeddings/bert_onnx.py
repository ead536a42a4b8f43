"""The ONNX graph of a BERT sentence encoder, built from its weights.

    build_model(config, weights) -> onnx.ModelProto

Inputs `input_ids` and `attention_mask` (int64, [batch, tokens]; 1 for a
real token, 0 for padding); output `embeddings` (float32, [batch, hidden]).
The graph, in ONNX opset 17 operators:

1. embeddings: the word vector of each id, plus the position vector of its
   place, plus the vector of token type 0 (every input here is one segment),
   then LayerNormalization;
2. per encoder layer: self-attention (query, key and value projections,
   `num_heads` heads, scores scaled by 1/sqrt(head size), padding masked out
   with a large negative score before Softmax), its output projection, a
   residual and LayerNormalization; then the feed-forward block (a linear
   layer, exact GELU: x * (1 + erf(x / sqrt 2)) / 2, a linear layer), a
   residual and LayerNormalization;
3. mean pooling over the real tokens (the mask's weighted sum over its sum);
4. with `config.normalize`, division by the vector's L2 norm.

The build is deterministic: the same weights give the same bytes (names are
fixed, initializers in build order), so the file can be cached by the
weights' hash (onnx_cache.py). Linear weights are stored transposed
([in, out]) so each projection is one MatMul and one Add.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from servefleet._private.embeddings.model_files import BertConfig

OPSET = 17
# Added to the scores of padding positions before Softmax: exp() of it is 0
# in float32, and it stays finite (float32's minimum would overflow to -inf
# when the mask and the score are added, and a row of -inf is NaN).
MASKED_SCORE = -1e9


class _Graph:
    """Nodes and initializers, named in order, for one graph."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, *inputs: str, **attrs: Any) -> str:
        self._count += 1
        out = f"{kind.lower()}_{self._count}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], name=out, **attrs))
        return out

    def linear(self, x: str, weights: dict[str, np.ndarray], prefix: str) -> str:
        """x @ W.T + b for the torch-layout Linear `prefix` (weight [out, in])."""
        w = self.const(f"{prefix}.weight_t", weights[f"{prefix}.weight"].T.astype(np.float32))
        b = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"].astype(np.float32))
        return self.op("Add", self.op("MatMul", x, w), b)

    def layer_norm(self, x: str, weights: dict[str, np.ndarray], prefix: str,
                   eps: float) -> str:
        scale = self.const(f"{prefix}.weight", weights[f"{prefix}.weight"].astype(np.float32))
        bias = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"].astype(np.float32))
        return self.op("LayerNormalization", x, scale, bias, axis=-1, epsilon=eps)


def _embeddings(g: _Graph, c: BertConfig, w: dict[str, np.ndarray]) -> str:
    words = g.const("word_embeddings", w["embeddings.word_embeddings.weight"].astype(np.float32))
    positions = g.const("position_embeddings",
                        w["embeddings.position_embeddings.weight"].astype(np.float32))
    segment = g.const("token_type_0", w["embeddings.token_type_embeddings.weight"][0]
                      .astype(np.float32))
    g.const("zero", np.array([0], dtype=np.int64))
    g.const("one", np.array([1], dtype=np.int64))
    length = g.op("Slice", g.op("Shape", "input_ids"), "one", g.const("two", np.array(
        [2], dtype=np.int64)))  # [tokens]
    these = g.op("Slice", positions, "zero", length, "zero")  # rows 0 .. tokens-1
    summed = g.op("Add", g.op("Add", g.op("Gather", words, "input_ids", axis=0), these), segment)
    return g.layer_norm(summed, w, "embeddings.LayerNorm", c.layer_norm_eps)


def _split_heads(g: _Graph, x: str, c: BertConfig, perm: list[int]) -> str:
    """[batch, tokens, hidden] -> heads, transposed by `perm` from [b, t, heads, size]."""
    shape = g.const(f"heads_shape_{len(g.nodes)}",
                    np.array([0, 0, c.num_heads, c.head_size], dtype=np.int64))
    return g.op("Transpose", g.op("Reshape", x, shape), perm=perm)


def _attention(g: _Graph, x: str, mask_bias: str, c: BertConfig, w: dict[str, np.ndarray],
               p: str) -> str:
    q = _split_heads(g, g.linear(x, w, f"{p}.attention.self.query"), c, [0, 2, 1, 3])
    k = _split_heads(g, g.linear(x, w, f"{p}.attention.self.key"), c, [0, 2, 3, 1])
    v = _split_heads(g, g.linear(x, w, f"{p}.attention.self.value"), c, [0, 2, 1, 3])
    scale = g.const(f"{p}.scale", np.array(1.0 / math.sqrt(c.head_size), dtype=np.float32))
    scores = g.op("Add", g.op("Mul", g.op("MatMul", q, k), scale), mask_bias)
    context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)  # [b, heads, t, size]
    merged = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]),
                  g.const(f"{p}.merged_shape", np.array([0, 0, c.hidden_size], dtype=np.int64)))
    out = g.linear(merged, w, f"{p}.attention.output.dense")
    return g.layer_norm(g.op("Add", out, x), w, f"{p}.attention.output.LayerNorm",
                        c.layer_norm_eps)


def _feed_forward(g: _Graph, x: str, c: BertConfig, w: dict[str, np.ndarray], p: str) -> str:
    h = g.linear(x, w, f"{p}.intermediate.dense")
    erf = g.op("Erf", g.op("Div", h, g.const(f"{p}.sqrt2", np.array(math.sqrt(2.0),
                                                                     dtype=np.float32))))
    half = g.const(f"{p}.half", np.array(0.5, dtype=np.float32))
    gelu = g.op("Mul", g.op("Mul", h, half), g.op("Add", erf, g.const(
        f"{p}.one_f", np.array(1.0, dtype=np.float32))))
    out = g.linear(gelu, w, f"{p}.output.dense")
    return g.layer_norm(g.op("Add", out, x), w, f"{p}.output.LayerNorm", c.layer_norm_eps)


def _pool(g: _Graph, x: str, mask: str, normalize: bool) -> str:
    weights = g.op("Unsqueeze", mask, g.const("axis_last", np.array([2], dtype=np.int64)))
    summed = g.op("ReduceSum", g.op("Mul", x, weights), "one", keepdims=0)  # [b, hidden]
    count = g.op("ReduceSum", weights, "one", keepdims=0)                # [b, 1]
    tiny = g.const("min_count", np.array(1e-9, dtype=np.float32))
    mean = g.op("Div", summed, g.op("Max", count, tiny))
    if not normalize:
        return mean
    norm = g.op("ReduceL2", mean, axes=[1], keepdims=1)  # axes an attribute until opset 18
    return g.op("Div", mean, g.op("Max", norm, g.const("min_norm", np.array(
        1e-12, dtype=np.float32))))


def build_model(config: BertConfig, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The encoder's graph with `weights` as initializers (see the module docstring).
    Raises KeyError naming a tensor the weights lack."""
    g = _Graph()
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)  # [b, t]
    # [b, 1, 1, t]: 0 where a token is real, MASKED_SCORE where it is padding.
    mask_bias = g.op("Mul", g.op("Sub", g.const("one_f", np.array(1.0, dtype=np.float32)),
                                 g.op("Unsqueeze", mask, g.const(
                                     "axes_heads", np.array([1, 2], dtype=np.int64)))),
                     g.const("masked_score", np.array(MASKED_SCORE, dtype=np.float32)))
    x = _embeddings(g, config, weights)
    for i in range(config.num_layers):
        prefix = f"encoder.layer.{i}"
        x = _feed_forward(g, _attention(g, x, mask_bias, config, weights, prefix), config,
                          weights, prefix)
    pooled = _pool(g, x, mask, config.normalize)
    g.nodes.append(helper.make_node("Identity", [pooled], ["embeddings"], name="output"))
    graph = helper.make_graph(
        g.nodes, "sentence_encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64,
                                       ["batch", "tokens"])],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT,
                                       ["batch", config.hidden_size])],
        g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="servefleet")
    model.ir_version = 8  # what ONNX Runtime 1.17 (the oldest the extra allows) reads
    onnx.checker.check_model(model)
    return model
