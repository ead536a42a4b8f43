"""`LLMConfig` and `build_openai_app`: models served behind one OpenAI API.

    app = build_openai_app([LLMConfig(model_id="kjv-trigram",
                                      deployment_config={"num_replicas": 2})])

One LLMServer deployment per model (named `LLMServer_<model>`, its options
from `deployment_config`: num_replicas, autoscaling_config,
max_ongoing_requests, ...) and one OpenAIIngress bound to their handles,
which routes each request by its `model` field; embedding models
(`embedding_configs`, embeddings/config.py) each get an EmbeddingServer
deployment behind the same ingress. As Ray's builder of the same name, it
also takes `{"llm_configs": [...], "embedding_configs": [...]}` of plain
dicts, so a config file can name it with `args` (import_path
`servefleet.llm:build_openai_app`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from servefleet._private.applications.api import Application, deployment
from servefleet._private.configuration.options import OptionError
from servefleet._private.embeddings.config import (
    EmbeddingConfig,
    bind_embedding_servers,
    embedding_config,
)
from servefleet._private.llm.openai_ingress import OpenAIIngress
from servefleet._private.llm.server import DEFAULT_ENGINE, LLMServer


@dataclass
class LLMConfig:
    """One served model.

    - `model_id`: the name clients ask for (`model` in a request);
    - `engine`: the engine class, "module:Class" (default the n-gram model
      of servefleet.llm, NGramEngine), made in each replica with
      `engine_kwargs` (JSON values);
    - `deployment_config`: the options of the model's deployment, as
      `@servefleet.deployment` takes them (num_replicas, autoscaling_config,
      max_ongoing_requests, max_queued_requests, request_router: with
      "prefix_affinity" a conversation's turns stay on one replica, ...).
    """

    model_id: str
    engine: str = DEFAULT_ENGINE
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    deployment_config: dict[str, Any] = field(default_factory=dict)
    # Models with the same `deployment_name` share one deployment, several per
    # replica (at most `max_models_per_replica`, loaded on first use, least
    # recently used out; the first config's deployment_config counts). ""
    # (the default): the model has a deployment of its own.
    deployment_name: str = ""
    max_models_per_replica: int = 0


def _config(value: Any, index: int) -> LLMConfig:
    if isinstance(value, LLMConfig):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"model_id", "engine", "engine_kwargs", "deployment_config",
                                "deployment_name", "max_models_per_replica"}
        if unknown or not isinstance(value.get("model_id"), str):
            raise OptionError(f"llm_configs[{index}]: needs model_id (a string); unknown "
                              f"keys: {sorted(unknown)}")
        return LLMConfig(**value)
    raise OptionError(f"llm_configs[{index}]: an LLMConfig or a mapping, not {value!r}")


def build_openai_app(llm_configs: Sequence[LLMConfig | Mapping[str, Any]] |
                     Mapping[str, Any] = (), *,
                     embedding_configs: Sequence[EmbeddingConfig | Mapping[str, Any]] = (),
                     ingress_options: Mapping[str, Any] | None = None) -> Application:
    """The application: an OpenAI ingress over one deployment per model
    (language models, and embedding models serving /v1/embeddings and /v1/rerank)."""
    if isinstance(llm_configs, Mapping):
        embedding_configs = llm_configs.get("embedding_configs") or embedding_configs
        llm_configs = llm_configs.get("llm_configs") or []
    configs = [_config(c, i) for i, c in enumerate(llm_configs)]
    embedders = [embedding_config(c, i) for i, c in enumerate(embedding_configs)]
    if not configs and not embedders:
        raise OptionError("build_openai_app needs at least one LLMConfig or EmbeddingConfig")
    ids = [c.model_id for c in configs] + [c.model_id for c in embedders]
    if len(set(ids)) != len(ids):
        raise OptionError(f"model ids must be distinct: {ids}")
    groups: dict[str, list[LLMConfig]] = {}
    for c in configs:
        groups.setdefault(c.deployment_name or f"LLMServer_{_name(c.model_id)}", []).append(c)
    servers: dict[str, Application] = {}
    shared: list[str] = []
    for name, group in groups.items():
        first = group[0]
        server = deployment(name=_name(name), **first.deployment_config)(LLMServer)
        if first.deployment_name:  # several models, multiplexed
            models = {c.model_id: [c.engine, c.engine_kwargs] for c in group}
            bound = server.bind(name, models=models, max_models_per_replica=max(
                1, first.max_models_per_replica or len(group)))
            shared += models
        else:
            bound = server.bind(first.model_id, first.engine, first.engine_kwargs)
        servers.update({c.model_id: bound for c in group})
    ingress = deployment(name="OpenAIIngress", **dict(ingress_options or {}))(OpenAIIngress)
    return ingress.bind(servers, shared, bind_embedding_servers(embedders))


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)
