"""What a handle call returns (servefleet/_private/handles/handle.py makes them).

- `DeploymentResponse`: one answer; `await` it in async code, or call
  `.result(timeout_s=...)` from sync code: a replica's threads, or a plain
  script (the call then runs on handle_loop's private loop). It waits
  without limit unless given a timeout, as Ray's does. Passed
  as an argument to another handle call, it is awaited first and its
  result passed on (servefleet/_private/handles/handle.py).
- `DeploymentResponseGenerator`: a streaming call's items (`stream=True`),
  read at most STREAM_BUFFER ahead of the consumer; `async for` in async
  code, `for` in sync code; leaving early cancels the call, and so the
  generator at the replica.

Both raise what the target raised (its type, with the replica's traceback
as the cause: handle_router.remote_error), or a HandleError when the call
could not be routed (handle_errors.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from typing import Any

from servefleet._private.handle_errors import RequestCancelledError

# How long `.result()` waits by default: no limit, as Ray's (a request
# timeout, if the deployment's caller set one, still ends the call).
DEFAULT_RESULT_TIMEOUT_S: float | None = None
# Items a streaming call reads ahead of its consumer.
STREAM_BUFFER = 16
# The end of a stream, on its queue.
_END = object()
# No timeout given to result().
_UNSET: Any = object()


class DeploymentResponse:
    """The pending result of `remote()`: await it, or `.result()` from sync code."""

    def __init__(self, future: asyncio.Future | concurrent.futures.Future) -> None:
        self._future = future

    def __await__(self):
        return self._awaitable().__await__()

    def _awaitable(self) -> asyncio.Future:
        """The result as a future of the running loop (the call may run on
        another loop: the private one, or a replica's)."""
        future = self._future
        if isinstance(future, concurrent.futures.Future):
            return asyncio.wrap_future(future)
        if future.get_loop() is not asyncio.get_running_loop():
            return asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(_wait(future), future.get_loop()))
        return future

    def result(self, timeout_s: float | None = DEFAULT_RESULT_TIMEOUT_S, *,
               timeout: Any = _UNSET, _skip_asyncio_check: bool = False) -> Any:
        """Wait for the answer from sync code: at most `timeout_s` seconds
        (`timeout` is the older name; None: no limit); then TimeoutError, and
        the call is cancelled. RuntimeError in async code, where waiting
        would block the loop the call needs."""
        wait = timeout_s if timeout is _UNSET else timeout
        if wait is not None and not isinstance(wait, int | float):
            raise TypeError(f"timeout_s must be a number of seconds or None, not {wait!r}")
        if not isinstance(self._future, concurrent.futures.Future) or (
                not _skip_asyncio_check and _loop_running_here()):
            raise RuntimeError("result() would block the event loop: use `await` in async code")
        try:
            return self._future.result(wait)
        except concurrent.futures.TimeoutError:
            self._future.cancel()
            raise TimeoutError(f"no answer within {wait:g} s (result(timeout_s=...) waits "
                               "longer; None waits for ever)") from None
        except concurrent.futures.CancelledError:
            raise RequestCancelledError() from None

    def cancelled(self) -> bool:
        return self._future.cancelled()

    def cancel(self) -> None:
        """Cancel the call (the replica cancels the target when it is async)."""
        future = self._future
        if isinstance(future, concurrent.futures.Future):
            future.cancel()
        else:
            future.get_loop().call_soon_threadsafe(future.cancel)


async def _wait(future: asyncio.Future) -> Any:
    return await future


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


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
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            # The call runs on another loop (the private one, in a driver's async code).
            return await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(self._next_here(), self._loop))
        return await self._next_here()

    async def _next_here(self) -> Any:
        self._begin()
        assert self._queue is not None
        try:
            item = await self._queue.get()
        except asyncio.CancelledError:
            await self.aclose()
            raise
        if item is _END:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._close_here(),
                                                                       self._loop))
        else:
            await self._close_here()

    async def _close_here(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def cancel(self) -> None:
        """Stop the stream (the generator at the replica is cancelled)."""
        if self._task is not None and not self._task.done():
            self._task.get_loop().call_soon_threadsafe(self._task.cancel)

    def __iter__(self) -> Any:
        if self._loop is None:
            raise RuntimeError("use `async for` in async code (`for` would block the loop "
                               "the call needs)")
        loop = self._loop
        try:
            while True:
                try:
                    yield asyncio.run_coroutine_threadsafe(self._next_here(), loop).result()
                except StopAsyncIteration:
                    return
        finally:
            asyncio.run_coroutine_threadsafe(self._close_here(), loop).result()

    def __del__(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


