"""What a handle call returns (servefleet/handle.py makes them).

- `DeploymentResponse`: one answer; `await` it in async code, or call
  `.result()` from sync code in a replica's threads (DEFAULT_RESULT_TIMEOUT_S
  unless given a timeout).
- `DeploymentResponseGenerator`: a streaming call's items (`stream=True`),
  read at most STREAM_BUFFER ahead of the consumer; leaving early cancels
  the call, and so the generator at the replica.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from typing import Any

# How long `.result()` waits by default.
DEFAULT_RESULT_TIMEOUT_S = 60.0
# Items a streaming call reads ahead of its consumer.
STREAM_BUFFER = 16
# The end of a stream, on its queue.
_END = object()


class HandleError(Exception):
    """A handle call failed: the target raised, or no replica could take it."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class DeploymentResponse:
    """The pending result of `remote()`: await it, or `.result()` from sync code."""

    def __init__(self, future: asyncio.Future | concurrent.futures.Future) -> None:
        self._future = future

    def __await__(self):
        future = self._future
        if isinstance(future, concurrent.futures.Future):
            future = asyncio.wrap_future(future)
        return future.__await__()

    def result(self, timeout: float | None = DEFAULT_RESULT_TIMEOUT_S) -> Any:
        """Wait for the answer from sync code: at most `timeout` seconds
        (None: no limit); then TimeoutError, and the call is cancelled."""
        if not isinstance(self._future, concurrent.futures.Future):
            raise RuntimeError("result() would block the event loop: use `await` in async code")
        try:
            return self._future.result(timeout)
        except concurrent.futures.TimeoutError:
            self._future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s (result(timeout=...) waits "
                               "longer; None waits for ever)") from None


class DeploymentResponseGenerator:
    """The items of a streaming handle call: `async for` in async code, plain
    `for` in sync code running in a replica's threads. Leaving early (break,
    cancellation, aclose()) cancels the generator at the replica."""

    def __init__(self, start: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Future | None = None
        self._start, self._loop = start, loop

    def _begin(self) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue(STREAM_BUFFER)
            self._task = asyncio.ensure_future(self._start(self._queue))

    def __aiter__(self) -> DeploymentResponseGenerator:
        return self

    async def __anext__(self) -> Any:
        self._begin()
        assert self._queue is not None
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            await self.aclose()
            raise
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, HandleError):
            raise item
        return item

    async def aclose(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def __iter__(self) -> Any:
        if self._loop is None:
            raise RuntimeError("use `async for` in async code")
        loop = self._loop
        try:
            while True:
                try:
                    yield asyncio.run_coroutine_threadsafe(self.__anext__(), loop).result()
                except StopAsyncIteration:
                    return
        finally:
            asyncio.run_coroutine_threadsafe(self.aclose(), loop).result()

    def __del__(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


