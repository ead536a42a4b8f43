"""replica/user_threads.py: results, errors, context, the thread cap, and
dropped results of cancelled callers."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from servefleet.replica.user_threads import UserThreads

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="")


async def test_results_errors_and_the_callers_context() -> None:
    threads = UserThreads(4)
    VAR.set("request-7")
    assert await threads.call(lambda: VAR.get()) == "request-7"
    assert await threads.call(sum, [1, 2, 3]) == 6
    with pytest.raises(ZeroDivisionError):
        await threads.call(lambda: 1 / 0)
    threads.shutdown()


async def test_many_calls_at_once_all_settle_and_threads_stay_under_the_cap() -> None:
    threads = UserThreads(3)
    running, most = 0, 0
    lock = threading.Lock()
    gate = threading.Event()

    def work(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait(5)
        with lock:
            running -= 1
        return i * i

    calls = [threads.call(work, i) for i in range(50)]
    await asyncio.sleep(0.1)
    gate.set()
    assert await asyncio.gather(*calls) == [i * i for i in range(50)]
    assert most == 3 and len(threads._threads) == 3
    # Idle threads are reused: no new ones for later calls.
    assert await asyncio.gather(*[threads.call(abs, -i) for i in range(10)]) == list(range(10))
    assert len(threads._threads) == 3
    threads.shutdown()


async def test_a_cancelled_caller_leaves_the_thread_to_finish_and_drops_the_result() -> None:
    threads = UserThreads(1)
    release, finished = threading.Event(), threading.Event()

    def slow() -> str:
        release.wait(5)
        finished.set()
        return "late"

    future = threads.call(slow)
    future.cancel()
    release.set()
    assert await asyncio.to_thread(finished.wait, 5)
    # The one thread is free again and serves the next call.
    assert await threads.call(lambda: "next") == "next"
    threads.shutdown()
