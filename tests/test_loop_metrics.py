"""servefleet_event_loop_tasks counts the loop's unfinished tasks when read."""

from __future__ import annotations

import asyncio
import threading

from servefleet._private.observability import loop_metrics


def _value() -> float:
    (metric,) = loop_metrics.TASKS.collect()
    return metric.samples[0].value


def test_the_gauge_counts_the_tasks_of_the_loop_that_watched() -> None:
    async def main() -> tuple[float, float, float]:
        loop_metrics.watch()
        before = _value()
        parked = [asyncio.create_task(asyncio.sleep(60)) for _ in range(5)]
        await asyncio.sleep(0)
        during = _value()
        # Read from another thread, as the metrics endpoint may be.
        seen: list[float] = []
        reader = threading.Thread(target=lambda: seen.append(_value()))
        reader.start()
        await asyncio.to_thread(reader.join)
        for task in parked:
            task.cancel()
        await asyncio.gather(*parked, return_exceptions=True)
        return before, during, seen[0]

    before, during, from_thread = asyncio.run(main())
    assert during == before + 5
    assert from_thread >= before + 5
