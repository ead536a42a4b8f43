"""Dynamic request batching: `@servefleet.batch`, with Ray Serve's shape.

    @servefleet.deployment(max_ongoing_requests=32)
    class Model:
        @servefleet.batch(max_batch_size=16, batch_wait_timeout_s=0.01)
        async def predict(self, inputs: list[str]) -> list[dict]:
            return [self.model(x) for x in inputs]

        async def __call__(self, request):
            return await self.predict(request.query_params["text"])

Each caller passes one input and gets one output. Concurrent calls wait in a
queue (one per instance); a batch goes to the method when it holds
`max_batch_size` calls or when its oldest call has waited
`batch_wait_timeout_s`. The method gets a list per argument (a call's
positional arguments line up by position, keyword arguments by name; every
call of a batch must pass the same ones) and returns a list of the same
length, or any other sequence of it, as Ray takes (a tuple, a numpy array
split along its first axis); caller i gets element i. How batches form and
run is batch_queue.py's.

- `max_concurrent_batches` (default 1): how many batches of one instance
  may run at once; the next batch forms while a slot is busy.
- `batch_size_fn(items) -> int`: sizes a batch by its inputs (each call's
  first argument) instead of counting calls, e.g. total tokens; a batch
  then takes calls while their size stays within `max_batch_size`. A call
  that alone is over it fails with a RuntimeError saying so.
- `sort_key(item) -> number`: batches inputs of similar keys together
  instead of in arrival order: the oldest waiting call and those whose keys
  are nearest to its. With `batch_size_fn` measuring padded tokens (calls x
  the longest input) and `sort_key` an input's length, this is batching by
  token budget: sequences of similar lengths, so little padding
  (servefleet's embedding server batches so: embeddings/batched.py).
- Streaming: an `async def` generator batch method yields, per step, a list
  with one item per call of the batch; each caller iterates its own stream
  (`async for token in self.generate(prompt)`). Yielding `StopIteration` (or
  `StopAsyncIteration`) in a call's place ends that call's stream; the
  others go on; all end when the generator does. A caller that leaves
  stops receiving; when all have, the generator is closed.
- A plain `def` batch method (Ray's newer sync form) is called from sync
  code, each caller blocking in its thread; the batch gathers on the
  replica's event loop and runs in a thread of its own.
- `max_batch_size` and `batch_wait_timeout_s` change at run time:
  `self.predict.set_max_batch_size(n)` and `.set_batch_wait_timeout_s(s)`
  (from `reconfigure`, typically); the next batch uses them.
- A batch method that raises fails every call of the batch with that
  exception (a stream: after the items it got); a result or step of the
  wrong length (or not a sequence: a scalar, a string, a mapping) fails
  them with a ValueError saying so.
- A caller cancelled while it waits leaves the queue; one cancelled while
  its batch runs does not disturb the others.
- With model multiplexing, the calls of a batch are split by model id:
  one call of the method per id, `get_multiplexed_model_id()` giving it.

The replica warns at load time when `max_ongoing_requests` is below a
batch method's `max_batch_size`: batches could then never fill.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from servefleet._private.batching.batch_queue import BatchQueue, Call, Settings
from servefleet._private.batching.multiplex import MODEL_ID
from servefleet._private.tracing import spans as tracing

DEFAULT_MAX_BATCH_SIZE = 10
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.01


def _check(max_batch_size: Any, batch_wait_timeout_s: Any, max_concurrent_batches: Any = 1,
           batch_size_fn: Any = None, sort_key: Any = None) -> None:
    if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) \
            or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if not isinstance(batch_wait_timeout_s, int | float) or isinstance(batch_wait_timeout_s,
                                                                        bool) \
            or batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be a number >= 0, got "
                         f"{batch_wait_timeout_s!r}")
    if not isinstance(max_concurrent_batches, int) or isinstance(max_concurrent_batches, bool) \
            or max_concurrent_batches < 1:
        raise ValueError(f"max_concurrent_batches must be an integer >= 1, got "
                         f"{max_concurrent_batches!r}")
    if batch_size_fn is not None and not callable(batch_size_fn):
        raise TypeError(f"batch_size_fn must be a function of the batch's inputs returning "
                        f"an integer, or None; got {type(batch_size_fn).__name__}")
    if sort_key is not None and not callable(sort_key):
        raise TypeError(f"sort_key must be a function of one input returning a number, or "
                        f"None; got {type(sort_key).__name__}")


def _whole(value: Any) -> Any:
    """Ray takes a float that is a whole number for max_batch_size (4.0 is 4)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class _Batched:
    """What `@batch` makes of an `async def`: callable with one input, with the
    settings' setters; on a class, each instance gets its own queue."""

    streaming = False

    def __init__(self, fn: Callable[..., Any], settings: Settings, owner: Any = None,
                 queues: dict[int, BatchQueue] | None = None) -> None:
        self._fn, self._settings, self._owner = fn, settings, owner
        self._queues = queues if queues is not None else {}
        functools.update_wrapper(self, fn)

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        bound = instance.__dict__.get(self._fn.__name__)
        if not isinstance(bound, _Batched):
            # Per instance: its own settings (set_* on one replica's model) and queue.
            s = self._settings
            bound = type(self)(self._fn, Settings(s.max_batch_size, s.batch_wait_timeout_s,
                                                  s.max_concurrent_batches, s.batch_size_fn,
                                                  s.sort_key),
                               instance, {})
            instance.__dict__[self._fn.__name__] = bound
        return bound

    @property
    def max_batch_size(self) -> int:
        return self._settings.max_batch_size

    @property
    def batch_wait_timeout_s(self) -> float:
        return self._settings.batch_wait_timeout_s

    @property
    def max_concurrent_batches(self) -> int:
        return self._settings.max_concurrent_batches

    def set_max_batch_size(self, value: int) -> None:
        value = _whole(value)
        _check(value, self._settings.batch_wait_timeout_s)
        self._settings.max_batch_size = value

    def set_batch_wait_timeout_s(self, value: float) -> None:
        _check(self._settings.max_batch_size, value)
        self._settings.batch_wait_timeout_s = float(value)

    # Ray's getters, under Ray's names.
    def _get_max_batch_size(self) -> int:
        return self.max_batch_size

    def _get_batch_wait_timeout_s(self) -> float:
        return self.batch_wait_timeout_s

    def _queue(self) -> BatchQueue:
        # One queue per event loop: a queue's futures belong to its loop.
        loop = id(asyncio.get_running_loop())
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = BatchQueue(self._fn, self._owner, self._settings,
                                                    self.streaming)
        return queue

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        return Call(args, kwargs, asyncio.get_running_loop().time(), MODEL_ID.get(),
                    trace=tracing.capture() if tracing.recording() else None)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        queue = self._queue()
        call = self._call(args, kwargs)
        call.future = asyncio.get_running_loop().create_future()
        queue.put(call)
        try:
            return await asyncio.shield(call.future)
        except asyncio.CancelledError:
            queue.leave(call)  # still waiting: leave the queue
            call.future.cancel()
            raise


class _StreamingBatched(_Batched):
    """What `@batch` makes of an `async def` generator: each call streams its items."""

    streaming = True

    async def __call__(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        queue = self._queue()
        call = self._call(args, kwargs)
        call.stream = asyncio.Queue()
        queue.put(call)
        try:
            while True:
                kind, value = await call.stream.get()
                if kind == "end":
                    return
                if kind == "error":
                    raise value
                yield value
        finally:
            call.finished = True  # closed or cancelled: its items are dropped from now on
            queue.leave(call)


class _SyncBatched(_Batched):
    """What `@batch` makes of a plain `def`, as Ray's newer versions allow:
    called from sync code (a replica runs plain methods in threads), each
    call waits in its thread while the batch gathers on an event loop (the
    replica's, else handle_loop's private one); the batch itself runs in a
    thread, so the loop never blocks on it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(f"@batch: {self._fn.__qualname__} is a plain def: call it from "
                               "sync code (or make it async def to await it)")
        from servefleet._private.handle_loop import loop_for_sync_code

        model_id = MODEL_ID.get()

        async def call() -> Any:
            MODEL_ID.set(model_id)
            return await _Batched.__call__(self, *args, **kwargs)

        return asyncio.run_coroutine_threadsafe(call(), loop_for_sync_code()).result()


def _in_thread(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as an async function that runs it in the loop's default executor,
    in the caller's context (its multiplexed model id)."""
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(
            None, functools.partial(context.run, fn, *args, **kwargs))

    return run


def batch(_fn: Callable[..., Any] | None = None, /, *,
          max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
          batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S,
          max_concurrent_batches: int = 1,
          batch_size_fn: Callable[[list[Any]], int] | None = None,
          sort_key: Callable[[Any], float] | None = None) -> Any:
    """Gather concurrent calls of an async method (or function) into batches.

    ValueError for a setting out of range, TypeError for a batch_size_fn or
    sort_key that is not callable or a target that is not an `async def` (or async generator).
    """
    max_batch_size = _whole(max_batch_size)
    _check(max_batch_size, batch_wait_timeout_s, max_concurrent_batches, batch_size_fn, sort_key)

    def wrap(fn: Callable[..., Any]) -> _Batched:
        settings = Settings(max_batch_size, float(batch_wait_timeout_s),
                            max_concurrent_batches, batch_size_fn, sort_key)
        if inspect.isasyncgenfunction(fn):
            return _StreamingBatched(fn, settings)
        if inspect.iscoroutinefunction(fn):
            return _Batched(fn, settings)
        if inspect.isgeneratorfunction(fn) or not callable(fn):
            raise TypeError(f"@batch: {getattr(fn, '__qualname__', fn)!r} must be a function "
                            "that gets a list of inputs and returns a list of outputs (async "
                            "def or def), or an async generator yielding a list per step")
        return _SyncBatched(_in_thread(fn), settings)

    return wrap(_fn) if _fn is not None else wrap


def batch_sizes(obj: Any) -> dict[str, int]:
    """The max_batch_size of each batch method of a deployment's class (and of
    its bases: an ingress class wraps the user's), by name."""
    cls = obj if inspect.isclass(obj) else type(obj)
    found: dict[str, int] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, _Batched):
                found[name] = value.max_batch_size
            elif name in found:
                del found[name]  # overridden by a plain attribute
    return found
