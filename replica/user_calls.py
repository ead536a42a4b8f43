"""Calling user code from the replica's loop: coroutines on the loop, plain
functions in threads, each in the request's context (its request id, and
with tracing on its span: a user's own spans join the request's trace).

With tracing on, user code is a "user code" span; a plain function that
waited QUEUED_SPAN_S or more for a user thread also gets a "queued" span for
that wait (shorter waits are only the span's `servefleet.queued_s`: a span
each would double what a traced request costs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from servefleet._private.tracing import spans as tracing

QUEUED_SPAN_S = 0.001
T = TypeVar("T")


def is_async_callable(fn: Any) -> bool:
    try:
        return _is_async(fn)
    except TypeError:  # unhashable: asked each time
        return _is_async.__wrapped__(fn)


@functools.lru_cache(maxsize=256)
def _is_async(fn: Any) -> bool:
    """Asked per request of the same few handlers (bound methods compare equal
    when their instance and function do): inspect's answer costs more than
    the lookup."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(type(fn), "__call__", None))  # noqa: B004 - the method, not callability


async def call_user(fn: Any, executor: concurrent.futures.Executor, *args: Any) -> Any:
    """Call user code: coroutines on the loop, everything else in the thread pool."""
    if is_async_callable(fn):
        return await fn(*args)
    # In the request's context: its request id reaches the user's log lines.
    context = contextvars.copy_context()
    result = await asyncio.get_running_loop().run_in_executor(
        executor, lambda: context.run(fn, *args))
    if inspect.isawaitable(result):
        result = await result
    return result


async def traced(work: Awaitable[T]) -> T:
    """Await user code's coroutine (or an ASGI app's call) as a "user code"
    span made current; without tracing, just await it."""
    if not tracing.recording():
        return await work
    with tracing.made_current(tracing.child("user code")):
        return await work


def in_thread(fn: Callable[[], T]) -> Callable[[], T]:
    """`fn` to run in a user thread, as a "user code" span there (and a
    "queued" one for a long wait for the thread); `fn` itself without tracing."""
    if not tracing.recording():
        return fn
    queued_ns = time.time_ns()

    def run() -> T:
        begun = time.time_ns()
        waited_s = (begun - queued_ns) / 1e9
        if waited_s >= QUEUED_SPAN_S:
            tracing.end(tracing.child("queued", start_ns=queued_ns))
        with tracing.made_current(tracing.child("user code", {"servefleet.queued_s": waited_s},
                                                start_ns=begun)):
            return fn()

    return run
