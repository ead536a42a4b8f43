"""LLMServer: the deployment that holds one model's engine in each replica.

The OpenAI ingress (openai_ingress.py) calls `generate` through a streaming
handle. One call is one choice: it renders the prompt (chat messages with
the engine's template), counts the prompt's tokens, and yields first
`{"prompt_tokens": N}`, then one `{"text", "finish_reason"}` per token.
A caller that goes away closes the call's connection; the replica then
cancels this generator, and the engine stops at its next token.

The engine is made in `__init__` from an import path and JSON kwargs (so a
config file can name it) and loaded there (`load()`, when the engine has
one: NGramEngine trains), since a replica runs its deployment's constructor
before it reports ready: the first request meets a model, not its training.
`start()` then runs once on the serving loop, before the first request.
Models served several per replica load on their first request instead.
`stats()` tells a caller what this replica's engine did.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from servefleet._private.applications.user_code import import_user_object
from servefleet._private.batching.multiplex import _ModelCache, get_multiplexed_model_id
from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.llm import llm_metrics as m
from servefleet._private.llm.engine import ChatMessage, Engine, SamplingParams

DEFAULT_ENGINE = "servefleet._private.llm.ngram:NGramEngine"


def load_engine(path: str, kwargs: dict[str, Any]) -> Engine:
    """The engine class at `path` ("module:Class"), made with `kwargs`. The
    path is user code by the rules every import path meets (user_code.py: the
    deployer's own module, or servefleet's NGramEngine)."""
    engine = import_user_object(colon_form(path))(**kwargs)
    if not isinstance(engine, Engine):
        raise TypeError(f"{path} does not implement the Engine interface "
                        "(start, chat_prompt, count_tokens, generate)")
    return engine


class LLMServer:
    """A model's replica: `generate` streams the tokens of one choice.

    With `models` ({model id: [engine path, engine kwargs]}), one deployment
    serves several models, at most `max_models_per_replica` per replica:
    each made and started on its first request there, the least recently
    used dropped past the limit, requests routed to replicas that hold their
    model (multiplex.py); the request's model is its multiplexed model id."""

    def __init__(self, model_id: str, engine: str = DEFAULT_ENGINE,
                 engine_kwargs: dict[str, Any] | None = None,
                 models: dict[str, list[Any]] | None = None,
                 max_models_per_replica: int = 1) -> None:
        self.model_id = model_id
        self.models = dict(models or {})
        self.engine = None if self.models else load_engine(engine, dict(engine_kwargs or {}))
        load = getattr(self.engine, "load", None)
        if callable(load):
            load()  # before the replica reports ready (see the module docstring)
        self._engines = _ModelCache(self._load, max(1, max_models_per_replica)) \
            if self.models else None
        self._started: asyncio.Task[None] | None = None
        self.generated = 0

    async def _load(self, model_id: str) -> Engine:
        if model_id not in self.models:
            raise ValueError(f"this deployment serves {sorted(self.models)}, not {model_id!r}")
        path, kwargs = self.models[model_id]
        engine = load_engine(path, dict(kwargs or {}))
        await engine.start()
        return engine

    async def _ready(self) -> tuple[str, Engine]:
        """The request's model id and its started engine."""
        if self.models:
            model = get_multiplexed_model_id()
            assert self._engines is not None
            return model, await self._engines.get(model)
        assert self.engine is not None
        if self._started is None:
            self._started = asyncio.ensure_future(self.engine.start())
        await asyncio.shield(self._started)
        return self.model_id, self.engine

    async def generate(self, prompt: str, messages: Sequence[ChatMessage] | None,
                       params: SamplingParams) -> AsyncIterator[dict[str, Any]]:
        began = time.perf_counter()
        model, engine = await self._ready()
        text = engine.chat_prompt(messages) if messages is not None else prompt
        prompt_tokens = engine.count_tokens(text)
        tags = {"model": model}
        m.PROMPT_TOKENS.inc(prompt_tokens, tags=tags)
        yield {"prompt_tokens": prompt_tokens}
        last = None
        async for piece in engine.generate(text, params):
            now = time.perf_counter()
            if last is None:
                m.TIME_TO_FIRST_TOKEN.observe(now - began, tags=tags)
            else:
                m.TIME_PER_OUTPUT_TOKEN.observe(now - last, tags=tags)
            last = now
            self.generated += 1
            m.GENERATED_TOKENS.inc(tags=tags)
            yield {"text": piece.text, "finish_reason": piece.finish_reason}

    async def stats(self) -> dict[str, Any]:
        """This replica's model(s) and the tokens it generated."""
        return {"model": self.model_id,
                "loaded": list(self._engines.models) if self._engines else [self.model_id],
                "generated_tokens": self.generated}
