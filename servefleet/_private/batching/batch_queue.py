"""The queue behind one instance's `@batch` method: forming batches and sending
them (servefleet/_private/batching/batch.py has the decorator and what it promises).

A worker task, started by the first call that finds none, loops:

1. take a batch slot (at most `max_concurrent_batches` batches run at once);
2. wait until the waiting calls fill a batch or the oldest has waited
   `batch_wait_timeout_s`; the settings are read now, so a change applies to
   the next batch;
3. take the batch from the front of the queue: `max_batch_size` calls, or,
   with `batch_size_fn`, the longest run of calls whose inputs it sizes
   within `max_batch_size` (a call that does not fit waits, first in line,
   for the next batch; one that alone is too large fails with a
   RuntimeError); with `sort_key`, not the front of the queue but the
   oldest call and the calls whose keys are nearest to its, one at a time
   from either side of it in key order while the batch stays within
   `max_batch_size` (so inputs of similar sizes go together, and no call
   waits behind newer ones for ever: the oldest always goes);
4. send it in a task of its own that gives the slot back when done: one call
   of the user's function per multiplexed model id among the calls (each
   with its id in `get_multiplexed_model_id()`), usually one.

The worker ends when the queue is empty; it runs in a context of its own
(no request's id or trace is a whole batch's), and each call whose trace is
sampled gets a "@batch wait" span from its arrival to its batch's start.
Taking the slot before forming the batch means that, with one slot, calls
arriving while a batch runs gather into the next one instead of leaving in a
batch of one.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from servefleet._private.batching.multiplex import MODEL_ID
from servefleet._private.tracing import spans as tracing

# What a streaming batch method yields in a call's place to end that call's stream
# (the class or an instance; compared by identity: an input may be an array).
_STOP = (StopIteration, StopAsyncIteration)
# Sized and iterable, yet not one output per element: text and bytes iterate
# by character, mappings and tables (a DataFrame: `columns`) by key or
# column, sets in no order.
_NOT_OUTPUTS = (str, bytes, bytearray, memoryview, Mapping, AbstractSet)


@dataclass
class Settings:
    max_batch_size: int
    batch_wait_timeout_s: float
    max_concurrent_batches: int = 1
    batch_size_fn: Callable[[list[Any]], int] | None = None
    sort_key: Callable[[Any], float] | None = None


@dataclass(eq=False)
class Call:
    """One caller's input, and where its answer goes: a future (one output) or a
    queue of ("item" | "end" | "error", value) (a stream)."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    queued_at: float
    model_id: str
    future: asyncio.Future[Any] | None = None
    stream: asyncio.Queue[tuple[str, Any]] | None = None
    # A stream's caller stopped listening, or its stream was ended.
    finished: bool = False
    # The caller's trace context when its trace is sampled (tracing.py).
    trace: Any = None
    queued_ns: int = field(default_factory=time.time_ns)

    @property
    def item(self) -> Any:
        """What batch_size_fn measures: the first positional argument (else the first keyword's)."""
        return self.args[0] if self.args else next(iter(self.kwargs.values()), None)

    @property
    def gone(self) -> bool:
        return self.finished if self.stream is not None else bool(
            self.future is not None and self.future.done())

    def fail(self, error: BaseException) -> None:
        if self.stream is not None:
            if not self.finished:
                self.finished = True
                self.stream.put_nowait(("error", error))
        elif self.future is not None and not self.future.done():
            self.future.set_exception(error)


@dataclass(eq=False)
class BatchQueue:
    fn: Callable[..., Any]
    owner: Any
    settings: Settings
    streaming: bool = False
    calls: list[Call] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task[None] | None = None
    running: set[asyncio.Task[None]] = field(default_factory=set)
    slots: asyncio.Semaphore | None = None

    def put(self, call: Call) -> None:
        self.calls.append(call)
        self.arrived.set()
        if self.worker is None or self.worker.done():
            # A context of its own: batches serve many requests, so none of
            # their ids or traces is the batch's (each call's is its own).
            self.worker = asyncio.create_task(self._run(), context=contextvars.Context())

    def leave(self, call: Call) -> None:
        """A caller gone before its batch: out of the queue."""
        if call in self.calls:
            self.calls.remove(call)

    async def _run(self) -> None:
        if self.slots is None:
            self.slots = asyncio.Semaphore(self.settings.max_concurrent_batches)
        while self.calls:
            await self.slots.acquire()
            try:
                batch = await self._gather()
            except Exception as e:  # batch_size_fn raised: no batch can be formed
                self.slots.release()
                for call in self.calls:
                    call.fail(e)
                self.calls.clear()
                return
            except BaseException:
                self.slots.release()
                raise
            if not batch:
                self.slots.release()
                continue
            task = asyncio.create_task(self._send_all(batch))
            self.running.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        assert self.slots is not None
        self.slots.release()

    async def _gather(self) -> list[Call]:
        loop = asyncio.get_running_loop()
        limit, wait = self.settings.max_batch_size, self.settings.batch_wait_timeout_s
        deadline = self.calls[0].queued_at + wait
        while not self._full(limit) and loop.time() < deadline:
            self.arrived.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await self.arrived.wait()
            except TimeoutError:
                break
        batch = self._take(limit)
        return [c for c in batch if not c.gone]

    def _full(self, limit: int) -> bool:
        if self.settings.sort_key is not None:
            chosen = self._nearest(limit)
            return len(chosen) < len(self.calls) or (
                bool(chosen) and self._measure([self.calls[i] for i in chosen]) >= limit)
        if self.settings.batch_size_fn is None:
            return len(self.calls) >= limit
        fitting = self._fitting(limit)
        return fitting < len(self.calls) or (fitting > 0 and self._size(
            self.calls[:fitting]) >= limit)

    def _take(self, limit: int) -> list[Call]:
        if self.settings.batch_size_fn is not None:
            while self.calls and self._measure(self.calls[:1]) > limit:
                too_big = self.calls.pop(0)  # alone over the limit: it can never go
                too_big.fail(RuntimeError(
                    f"batch_size_fn sizes this input at {self._size([too_big])}, more than "
                    f"max_batch_size ({limit}): raise max_batch_size or check batch_size_fn"))
        if self.settings.sort_key is not None:
            chosen = set(self._nearest(limit))
            batch = [c for i, c in enumerate(self.calls) if i in chosen]
            self.calls = [c for i, c in enumerate(self.calls) if i not in chosen]
            return batch
        count = limit if self.settings.batch_size_fn is None else self._fitting(limit)
        batch, self.calls = self.calls[:count], self.calls[count:]
        return batch

    def _measure(self, calls: list[Call]) -> int:
        """A batch's size: batch_size_fn's, else its number of calls."""
        return len(calls) if self.settings.batch_size_fn is None else self._size(calls)

    def _nearest(self, limit: int) -> list[int]:
        """With sort_key: the positions in the queue of the oldest call and of
        the calls nearest to it by key, taken one at a time (the nearer side
        of it in key order first, the other when that one does not fit)
        while the batch measures within `limit`. [] for an empty queue."""
        if not self.calls:
            return []
        key = self.settings.sort_key
        assert key is not None
        keys = [key(c.item) for c in self.calls]
        order = sorted(range(len(self.calls)), key=lambda i: (keys[i], i))
        at = order.index(0)
        low, high, chosen = at - 1, at + 1, [0]
        while low >= 0 or high < len(order):
            sides = [i for i in (low, high) if 0 <= i < len(order)]
            sides.sort(key=lambda i: (abs(keys[order[i]] - keys[0]), order[i]))
            for side in sides:
                if self._measure([self.calls[j] for j in (*chosen, order[side])]) <= limit:
                    chosen.append(order[side])
                    low, high = (low - 1, high) if side == low else (low, high + 1)
                    break
            else:
                break
        return sorted(chosen)

    def _fitting(self, limit: int) -> int:
        """How many calls from the front batch_size_fn sizes within `limit`."""
        count = 0
        while count < len(self.calls) and self._size(self.calls[:count + 1]) <= limit:
            count += 1
        return count

    def _size(self, calls: list[Call]) -> int:
        assert self.settings.batch_size_fn is not None
        size = self.settings.batch_size_fn([c.item for c in calls])
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"batch_size_fn returned {size!r}, not an integer")
        return size

    async def _send_all(self, batch: list[Call]) -> None:
        """One call of the user's function per multiplexed model id."""
        _traced_waits(batch)
        groups: dict[str, list[Call]] = {}
        for call in batch:
            groups.setdefault(call.model_id, []).append(call)
        await asyncio.gather(*(asyncio.create_task(self._send(model_id, calls))
                               for model_id, calls in groups.items()))

    async def _send(self, model_id: str, batch: list[Call]) -> None:
        MODEL_ID.set(model_id)  # this task's context only
        target = self.fn if self.owner is None else functools.partial(self.fn, self.owner)
        try:
            args, kwargs = _columns(batch)
            if self.streaming:
                await self._stream(target(*args, **kwargs), batch)
                return
            results = _outputs(self.fn, await target(*args, **kwargs), len(batch),
                               "returned", "return")
        except Exception as e:
            for call in batch:
                call.fail(e)
            return
        for call, result in zip(batch, results, strict=True):
            if call.future is not None and not call.future.done():
                call.future.set_result(result)

    async def _stream(self, steps: Any, batch: list[Call]) -> None:
        """Hand each step's items to their streams; every open stream ends with
        the generator. Once every caller has gone or been ended, the generator
        is closed: nobody is left to read what it would make."""
        try:
            async for step in steps:
                items = _outputs(self.fn, step, len(batch), "yielded", "yield")
                for call, item in zip(batch, items, strict=True):
                    if call.finished or call.stream is None:
                        continue
                    if item is StopIteration or item is StopAsyncIteration or isinstance(
                            item, _STOP):
                        call.finished = True
                        call.stream.put_nowait(("end", None))
                    else:
                        call.stream.put_nowait(("item", item))
                if all(call.finished for call in batch):
                    break
        except Exception as e:
            for call in batch:
                call.fail(e)
        finally:
            await steps.aclose()
            for call in batch:
                if not call.finished and call.stream is not None:
                    call.finished = True
                    call.stream.put_nowait(("end", None))


def _traced_waits(batch: list[Call]) -> None:
    """Each sampled call's wait for its batch, as a span of its request."""
    for call in batch:
        if call.trace is not None:
            tracing.end(tracing.child("@batch wait", {"servefleet.batch.size": len(batch)},
                                      start_ns=call.queued_ns, context=call.trace))


def _columns(batch: list[Call]) -> tuple[list[list[Any]], dict[str, list[Any]]]:
    """One list per positional argument and per keyword, lined up by caller."""
    first = batch[0]
    if any(len(c.args) != len(first.args) or c.kwargs.keys() != first.kwargs.keys()
           for c in batch):
        raise TypeError("calls to a batch method must pass the same number of positional "
                        "arguments and the same keyword arguments")
    return ([[c.args[i] for c in batch] for i in range(len(first.args))],
            {k: [c.kwargs[k] for c in batch] for k in first.kwargs})


def _outputs(fn: Any, results: Any, size: int, did: str, must: str) -> list[Any]:
    """A result (or a stream's step) as one output per call, in order. As in
    Ray, any sequence of the batch's length will do: a list, a tuple, a numpy
    array (split along its first axis), ... ValueError for anything else,
    naming what came instead."""
    got = f"a {type(results).__name__}"
    if not isinstance(results, _NOT_OUTPUTS) and not hasattr(results, "columns"):
        try:
            count = len(results)
            outputs = list(results) if count == size else []
        except TypeError:  # no length (a generator, a scalar, a 0-d array), or not iterable
            pass
        else:
            if len(outputs) == size:
                return outputs
            got = f"{count} outputs"
    raise ValueError(f"the batch method {fn.__qualname__} {did} {got} for a batch of {size} "
                     f"inputs; it must {must} a sequence (a list, a tuple, a numpy array, ...) "
                     "with one output per input")
