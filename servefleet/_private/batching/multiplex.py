"""Model multiplexing: many models, each loaded on few replicas (Ray Serve's shape).

    @servefleet.deployment(num_replicas=4)
    class Models:
        @servefleet.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str):
            return await load(model_id)

        async def __call__(self, request):
            model = await self.get_model(servefleet.get_multiplexed_model_id())
            return model.predict(await request.body())

A request names its model with the header `serve_multiplexed_model_id`
(Ray Serve's), or `handle.options(multiplexed_model_id="m")`; inside the
request `get_multiplexed_model_id()` gives it. Each replica keeps up to
`max_num_models_per_replica` models in an LRU: loading one more evicts the
least recently used first, awaiting its `aclose()` when it has one, then
dropping it (its `__del__` runs when Python collects it). Concurrent
requests for a model that is loading wait for the one load.

Routing: every replica answer carries the models it holds
(`x-servefleet-models`), and proxies and handles send a request for a model
to a replica that holds it (the least busy of them), else to a replica with
room holding the fewest models, ties broken by rendezvous hashing of the id
(every router picks the same one without talking). When the holders are
full, the next request goes elsewhere and loads it there: a hot model
spreads (balancer.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

DEFAULT_MAX_MODELS = 3
# The model of the request being served (set by the replica from the header).
MODEL_ID: contextvars.ContextVar[str] = contextvars.ContextVar("multiplexed_model_id", default="")
# Every multiplexed cache of this process, for the models header.
_caches: list[_ModelCache] = []


def get_multiplexed_model_id() -> str:
    """The model id the current request asked for ("" when none)."""
    return MODEL_ID.get()


def loaded_model_ids() -> list[str]:
    """The ids of the models this process holds now (for `x-servefleet-models`)."""
    return [model_id for cache in _caches for model_id in cache.models]


class _ModelCache:
    def __init__(self, load: Callable[[str], Any], capacity: int) -> None:
        self._load, self.capacity = load, capacity
        self.models: OrderedDict[str, Any] = OrderedDict()
        self._loading: dict[str, asyncio.Future[Any]] = {}
        _caches.append(self)

    async def get(self, model_id: str) -> Any:
        if not isinstance(model_id, str) or not model_id:
            raise ValueError("a multiplexed model id must be a non-empty string (set the "
                             "serve_multiplexed_model_id header, or "
                             "handle.options(multiplexed_model_id=...))")
        if model_id in self.models:
            self.models.move_to_end(model_id)
            return self.models[model_id]
        pending = self._loading.get(model_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._loading[model_id] = future
        try:
            while len(self.models) >= self.capacity:
                _, evicted = self.models.popitem(last=False)
                await _unload(evicted)
            model = await self._load(model_id)
            self.models[model_id] = model
            future.set_result(model)
            return model
        except BaseException as e:
            if isinstance(e, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(e)
                future.exception()  # retrieved: waiters get it, nobody else must
            raise
        finally:
            del self._loading[model_id]


async def _unload(model: Any) -> None:
    """An async `aclose()` is awaited; then the reference goes, and Python runs
    `__del__` (sync) when the model is collected."""
    close = getattr(model, "aclose", None)
    if close is not None:
        result = close()
        if inspect.isawaitable(result):
            await result


class _Multiplexed:
    def __init__(self, fn: Callable[..., Any], capacity: int) -> None:
        self._fn, self._capacity = fn, capacity
        self.__doc__ = fn.__doc__

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        cache = instance.__dict__.get("_servefleet_models_" + self._fn.__name__)
        if cache is None:
            cache = _ModelCache(functools.partial(self._fn, instance), self._capacity)
            instance.__dict__["_servefleet_models_" + self._fn.__name__] = cache
        return cache.get


def multiplexed(_fn: Callable[..., Any] | None = None, /, *,
                max_num_models_per_replica: int = DEFAULT_MAX_MODELS) -> Any:
    """Make an async `get_model(self, model_id)` a per-replica LRU of models."""
    if not isinstance(max_num_models_per_replica, int) or max_num_models_per_replica < 1:
        raise ValueError("max_num_models_per_replica must be an integer >= 1, got "
                         f"{max_num_models_per_replica!r}")

    def wrap(fn: Callable[..., Any]) -> _Multiplexed:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@multiplexed: {fn.__qualname__} must be an async def taking "
                            "the model id")
        return _Multiplexed(fn, max_num_models_per_replica)

    return wrap(_fn) if _fn is not None else wrap
