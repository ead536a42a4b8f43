"""A streaming batch method behind HTTP (tests/test_batch_streaming.py).

GET /?n=N streams N lines "N:step/size", one per step of the batch it joined
(size: how many requests that batch held); its stream ends after N steps
(StopIteration in its place) while longer ones in the batch go on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from servefleet import batch, deployment


@deployment(max_ongoing_requests=16)
class Streamer:
    @batch(max_batch_size=8, batch_wait_timeout_s=0.3)
    async def lines(self, counts: list[int]) -> AsyncIterator[list]:
        for step in range(max(counts)):
            yield [f"{n}:{step}/{len(counts)}\n" if step < n else StopIteration
                   for n in counts]
            await asyncio.sleep(0.02)

    async def __call__(self, request) -> AsyncIterator[str]:
        return self.lines(int(request.query_params["n"]))
