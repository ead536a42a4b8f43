"""The model of bench/batching.py: one accelerator (a lock) that costs 20 ms
per call plus 1 ms per input, served with and without @batch."""

from __future__ import annotations

import asyncio

from servefleet import batch

CALL_S, ITEM_S = 0.020, 0.001


class Accelerator:
    def __init__(self) -> None:
        self.lock = asyncio.Lock()

    async def run(self, inputs: list[str]) -> list[str]:
        async with self.lock:  # one batch at a time, as on one GPU
            await asyncio.sleep(CALL_S + ITEM_S * len(inputs))
        return [f"ok {x}" for x in inputs]


class Unbatched:
    def __init__(self) -> None:
        self.device = Accelerator()

    async def __call__(self, request) -> str:
        return (await self.device.run([request.query_params.get("x", "")]))[0]


class Batched:
    def __init__(self) -> None:
        self.device = Accelerator()

    @batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def predict(self, inputs: list[str]) -> list[str]:
        return await self.device.run(inputs)

    async def __call__(self, request) -> str:
        return await self.predict(request.query_params.get("x", ""))
