"""The asyncio tasks a process's event loop holds, as a gauge on its
/metrics (servefleet_event_loop_tasks): controllers, proxies and replicas
each call `watch()` from inside their loop, so that tasks leaking over days
show in a soak (bench/soak.py) as they would in production."""

from __future__ import annotations

import asyncio

from prometheus_client import Gauge

TASKS = Gauge("servefleet_event_loop_tasks",
              "asyncio tasks of the process's event loop that are not done")


def watch() -> None:
    """Count the running loop's tasks whenever the gauge is read (from any thread)."""
    loop = asyncio.get_running_loop()
    TASKS.set_function(lambda: _count(loop))


def _count(loop: asyncio.AbstractEventLoop) -> float:
    # all_tasks() from another thread can meet the loop's task set changing
    # size; asyncio retries that itself, and gives up with a RuntimeError.
    try:
        return float(len(asyncio.all_tasks(loop)))
    except RuntimeError:
        return float("nan")
