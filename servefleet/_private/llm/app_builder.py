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
`servefleet.llm:build_openai_app`); `ingress_options` (the ingress
deployment's options, Ray's `ingress_deployment_config` too) the same way.
The two forms take the same things: a key the mapping does not know is
refused by name, never ignored.
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


# What the mapping form takes (Ray's `ingress_deployment_config` is `ingress_options`).
ARGS_KEYS = ("llm_configs", "embedding_configs", "ingress_options", "ingress_deployment_config")


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
        llm_configs, embedding_configs, ingress_options = _from_args(
            llm_configs, embedding_configs, ingress_options)
    if ingress_options is not None and not isinstance(ingress_options, Mapping):
        raise OptionError(f"ingress_options: the ingress deployment's options as a mapping "
                          f"(max_ongoing_requests, num_replicas, ...), not {ingress_options!r}")
    if ingress_options is not None and "name" in ingress_options:
        raise OptionError("ingress_options: name is not an option here: the ingress is the "
                          "deployment OpenAIIngress (config files override it by that name)")
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


def _from_args(args: Mapping[str, Any], embedding_configs: Any,
               ingress_options: Any) -> tuple[Any, Any, Any]:
    """(llm_configs, embedding_configs, ingress_options) from the mapping
    form, Ray's `ingress_deployment_config` as `ingress_options`; OptionError
    for a key it does not know, or for one given both here and as a keyword."""
    unknown = set(args) - set(ARGS_KEYS)
    if unknown:
        raise OptionError(f"build_openai_app: unknown keys {sorted(unknown)}; it takes "
                          f"{', '.join(ARGS_KEYS)}")
    given = {k: args[k] for k in ARGS_KEYS if args.get(k) is not None}
    if "ingress_options" in given and "ingress_deployment_config" in given:
        raise OptionError("build_openai_app: ingress_options and ingress_deployment_config "
                          "name the same thing: give one")
    ingress = given.get("ingress_options", given.get("ingress_deployment_config"))
    for key, mapped, keyword in (("embedding_configs", given.get("embedding_configs"),
                                  embedding_configs),
                                 ("ingress_options", ingress, ingress_options)):
        if mapped is not None and keyword:
            raise OptionError(f"build_openai_app: {key} given twice, in the mapping and as a "
                              "keyword: give it once")
    return (given.get("llm_configs") or [], given.get("embedding_configs") or embedding_configs,
            ingress if ingress is not None else ingress_options)


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)
