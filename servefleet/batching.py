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
`batch_wait_timeout_s`. The method gets a list per positional argument (a
call's arguments line up by position; keyword arguments are not batched)
and returns a list of the same length; caller i gets element i.

- Both values change at run time: `self.predict.set_max_batch_size(n)` and
  `.set_batch_wait_timeout_s(s)` (from `reconfigure`, typically); the next
  batch uses them.
- A batch method that raises fails every call of the batch with that
  exception; a result of the wrong length (or not a list) fails them with
  a ValueError saying so.
- A caller cancelled while it waits leaves the queue; one cancelled while
  its batch runs does not disturb the others.
- Async generator batch methods (one output per input per step) are not
  supported: decorating one is a TypeError.

The replica warns at load time when `max_ongoing_requests` is below a
batch method's `max_batch_size`: batches could then never fill.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_BATCH_SIZE = 10
DEFAULT_BATCH_WAIT_TIMEOUT_S = 0.01


@dataclass
class _Call:
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    queued_at: float


@dataclass
class _Queue:
    """The waiting calls of one instance's batch method, and the task sending them."""

    fn: Callable[..., Any]
    owner: Any
    settings: _Settings
    calls: list[_Call] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None

    async def submit(self, args: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        call = _Call(args, loop.create_future(), loop.time())
        self.calls.append(call)
        self.arrived.set()
        if self.worker is None or self.worker.done():
            self.worker = asyncio.create_task(self._run())
        try:
            return await asyncio.shield(call.future)
        except asyncio.CancelledError:
            if call in self.calls:
                self.calls.remove(call)  # still waiting: leave the queue
            call.future.cancel()
            raise

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.calls:
            size, wait = self.settings.max_batch_size, self.settings.batch_wait_timeout_s
            deadline = self.calls[0].queued_at + wait
            while len(self.calls) < size and loop.time() < deadline:
                self.arrived.clear()
                try:
                    async with asyncio.timeout(max(0.0, deadline - loop.time())):
                        await self.arrived.wait()
                except TimeoutError:
                    break
            batch, self.calls = self.calls[:size], self.calls[size:]
            batch = [c for c in batch if not c.future.done()]
            if batch:
                await self._send(batch)

    async def _send(self, batch: list[_Call]) -> None:
        width = len(batch[0].args)
        if any(len(c.args) != width for c in batch):
            error: BaseException | None = TypeError(
                "calls to a batch method must pass the same number of positional arguments")
            results: Any = None
        else:
            columns = [[c.args[i] for c in batch] for i in range(width)]
            try:
                target = (self.fn if self.owner is None
                          else functools.partial(self.fn, self.owner))
                results, error = await target(*columns), None
            except Exception as e:
                results, error = None, e
            if error is None and (not isinstance(results, list | tuple)
                                  or len(results) != len(batch)):
                error = ValueError(
                    f"the batch method {self.fn.__qualname__} returned "
                    f"{_describe(results)} for a batch of {len(batch)} inputs; it must "
                    f"return a list with one output per input")
        for i, call in enumerate(batch):
            if call.future.done():
                continue  # its caller left while the batch ran
            if error is not None:
                call.future.set_exception(error)
            else:
                call.future.set_result(results[i])


def _describe(value: Any) -> str:
    if isinstance(value, list | tuple):
        return f"{len(value)} outputs"
    return f"a {type(value).__name__}, not a list"


@dataclass
class _Settings:
    max_batch_size: int
    batch_wait_timeout_s: float


def _check(max_batch_size: Any, batch_wait_timeout_s: Any) -> None:
    if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) \
            or max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size!r}")
    if not isinstance(batch_wait_timeout_s, int | float) or isinstance(batch_wait_timeout_s,
                                                                        bool) \
            or batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be a number >= 0, got "
                         f"{batch_wait_timeout_s!r}")


class _Batched:
    """What `@batch` makes of a function: callable with one input, with the
    settings' setters; on a class, each instance gets its own queue."""

    def __init__(self, fn: Callable[..., Any], settings: _Settings, owner: Any = None,
                 queues: dict[int, _Queue] | None = None) -> None:
        self._fn, self._settings, self._owner = fn, settings, owner
        self._queues = queues if queues is not None else {}
        functools.update_wrapper(self, fn)

    def __get__(self, instance: Any, owner: type | None = None) -> _Batched:
        if instance is None:
            return self
        bound = instance.__dict__.get(self._fn.__name__)
        if not isinstance(bound, _Batched):
            # Per instance: its own settings (set_* on one replica's model) and queue.
            bound = _Batched(self._fn, _Settings(self._settings.max_batch_size,
                                                 self._settings.batch_wait_timeout_s),
                             instance, {})
            instance.__dict__[self._fn.__name__] = bound
        return bound

    @property
    def max_batch_size(self) -> int:
        return self._settings.max_batch_size

    @property
    def batch_wait_timeout_s(self) -> float:
        return self._settings.batch_wait_timeout_s

    def set_max_batch_size(self, value: int) -> None:
        _check(value, self._settings.batch_wait_timeout_s)
        self._settings.max_batch_size = value

    def set_batch_wait_timeout_s(self, value: float) -> None:
        _check(self._settings.max_batch_size, value)
        self._settings.batch_wait_timeout_s = float(value)

    async def __call__(self, *args: Any) -> Any:
        # One queue per event loop: a queue's futures belong to its loop.
        loop = id(asyncio.get_running_loop())
        queue = self._queues.get(loop)
        if queue is None:
            queue = self._queues[loop] = _Queue(self._fn, self._owner, self._settings)
        return await queue.submit(args)


def batch(_fn: Callable[..., Any] | None = None, /, *,
          max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
          batch_wait_timeout_s: float = DEFAULT_BATCH_WAIT_TIMEOUT_S) -> Any:
    """Gather concurrent calls of an async method (or function) into batches."""
    _check(max_batch_size, batch_wait_timeout_s)

    def wrap(fn: Callable[..., Any]) -> _Batched:
        if inspect.isasyncgenfunction(fn):
            raise TypeError(f"@batch: {fn.__qualname__} is an async generator; generator "
                            "batch methods are not supported")
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"@batch: {fn.__qualname__} must be an async def (it gets a "
                            "list of inputs and returns a list of outputs)")
        return _Batched(fn, _Settings(max_batch_size, float(batch_wait_timeout_s)))

    return wrap(_fn) if _fn is not None else wrap


def batch_sizes(obj: Any) -> dict[str, int]:
    """The max_batch_size of each batch method of a deployment's class, by name."""
    cls = obj if inspect.isclass(obj) else type(obj)
    return {name: value.max_batch_size for name, value in vars(cls).items()
            if isinstance(value, _Batched)}
