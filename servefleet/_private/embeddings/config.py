"""`EmbeddingConfig`: one embedding model behind the OpenAI ingress.

`bind_embedding_servers(configs)` makes one EmbeddingServer deployment per
model (named `EmbeddingServer_<model>`, its options from `deployment_config`)
for build_openai_app (llm/app_builder.py) to hand the ingress. A config file
gives them as `embedding_configs` in the builder's `args`, plain mappings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from servefleet._private.applications.api import Application, deployment
from servefleet._private.configuration.options import OptionError
from servefleet._private.embeddings.batched import (
    DEFAULT_BATCH_WAIT_TIMEOUT_S,
    DEFAULT_MAX_BATCH_TOKENS,
    check_settings,
)
from servefleet._private.embeddings.model_files import DEFAULT_MODEL_ID
from servefleet._private.embeddings.server import DEFAULT_MODEL, EmbeddingServer


@dataclass
class EmbeddingConfig:
    """One served embedding model.

    - `model_id`: the name clients ask for (default "all-MiniLM-L6-v2");
    - `model`: the model class, "module:Class" (default servefleet's
      SentenceEncoder: all-MiniLM-L6-v2 on ONNX Runtime), made in each
      replica with `model_kwargs` (JSON values: model_dir, package, threads,
      cache_dir for SentenceEncoder);
    - `truncate`: cut inputs longer than the model takes (256 word pieces for
      MiniLM) instead of refusing them with a 400 (default False);
    - `max_batch_tokens`: batching by token budget: the padded tokens (its
      sequences x its longest) of one batch at most, default 8192; similar
      lengths are batched together; 0: no batching (each request's inputs
      run on their own, concurrently with other requests');
    - `batch_wait_timeout_s`: the longest a sequence waits for its batch to
      fill once the model is free (default 0: it goes at once; what arrives
      while a batch runs gathers into the next one anyway);
    - `deployment_config`: the options of the model's deployment, as
      `@servefleet.deployment` takes them (num_replicas, autoscaling_config,
      max_ongoing_requests, ...).
    """

    model_id: str = DEFAULT_MODEL_ID
    model: str = DEFAULT_MODEL
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    truncate: bool = False
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S
    deployment_config: dict[str, Any] = field(default_factory=dict)


def embedding_config(value: Any, index: int) -> EmbeddingConfig:
    """`value` as an EmbeddingConfig; OptionError naming what is wrong."""
    if isinstance(value, Mapping):
        known = {f.name for f in fields(EmbeddingConfig)}
        unknown = set(value) - known
        if unknown or not isinstance(value.get("model_id", DEFAULT_MODEL_ID), str):
            raise OptionError(f"embedding_configs[{index}]: model_id must be a string; "
                              f"unknown keys: {sorted(unknown)} (known: {sorted(known)})")
        value = EmbeddingConfig(**value)
    if not isinstance(value, EmbeddingConfig):
        raise OptionError(f"embedding_configs[{index}]: an EmbeddingConfig or a mapping, "
                          f"not {value!r}")
    try:  # the budget against the model's longest input: in its replica
        check_settings(value.max_batch_tokens, value.batch_wait_timeout_s, 0)
    except ValueError as e:
        raise OptionError(f"embedding_configs[{index}]: {e}") from None
    return value


def bind_embedding_servers(configs: Sequence[EmbeddingConfig]) -> dict[str, Application]:
    """model id -> its bound EmbeddingServer deployment."""
    bound = {}
    for c in configs:
        name = "EmbeddingServer_" + re.sub(r"[^A-Za-z0-9_]", "_", c.model_id)
        server = deployment(name=name, **c.deployment_config)(EmbeddingServer)
        bound[c.model_id] = server.bind(c.model_id, c.model, c.model_kwargs, c.truncate,
                                        c.max_batch_tokens, c.batch_wait_timeout_s)
    return bound
