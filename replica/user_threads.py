"""Long-lived threads that run the user's plain `def` code, and hand results
back to the event loop in batches.

`loop.run_in_executor` costs per call: a concurrent.futures.Future, its
wrapping into an asyncio future, and one wake-up of the loop (a write to its
self-pipe) per result. Under load many results finish while the loop is busy
elsewhere; here a worker that finishes appends to a list, and only the first
result since the loop last collected them wakes it. The loop then settles
the whole batch in one callback.

Threads start on demand, up to `size`, and stay; each takes the next call
from one queue. A call keeps its caller's context (the request id reaches the
user's log lines). Cancelling the awaiting task does not stop the thread
(Python cannot): the call runs to its end and its result is dropped.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class UserThreads:
    def __init__(self, size: int, name: str = "user") -> None:
        self._size = size
        self._name = name
        self._calls: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        # Results not yet handed to the loop: (future, value, error).
        self._done: list[tuple[asyncio.Future[Any], Any, BaseException | None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def call(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Run fn(*args) in a user thread; a future of the loop for its result."""
        loop = self._loop = self._loop or asyncio.get_running_loop()
        future = loop.create_future()
        self._calls.put((future, contextvars.copy_context(), fn, args))
        with self._lock:
            if self._idle:
                self._idle -= 1
            elif len(self._threads) < self._size:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self._name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
            # else: every thread is busy; the call waits its turn in the queue.
        return future

    def _work(self) -> None:
        while True:
            item = self._calls.get()
            if item is _STOP:
                return
            future, context, fn, args = item
            try:
                value, error = context.run(fn, *args), None
            except BaseException as e:  # handed to the awaiting task
                value, error = None, e
            with self._lock:
                self._done.append((future, value, error))
                wake = len(self._done) == 1
                self._idle += 1
            if wake:
                assert self._loop is not None
                try:
                    self._loop.call_soon_threadsafe(self._settle)
                except RuntimeError:
                    return  # the loop is closed: nobody awaits the result

    def _settle(self) -> None:
        with self._lock:
            done, self._done = self._done, []
        for future, value, error in done:
            if future.cancelled():
                continue
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

    def shutdown(self) -> None:
        """Let every thread end after its current call (it does not wait)."""
        for _ in self._threads:
            self._calls.put(_STOP)
