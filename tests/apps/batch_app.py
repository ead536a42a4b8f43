"""A deployment that batches its requests (tests/test_batching.py): each
answer says how large the batch it was part of was."""

from __future__ import annotations

import asyncio

from servefleet import batch, deployment


@deployment(max_ongoing_requests=16)
class Batcher:
    @batch(max_batch_size=8, batch_wait_timeout_s=0.05)
    async def predict(self, texts: list[str]) -> list[dict]:
        await asyncio.sleep(0.02)  # a model that costs the same for 1 or 8 inputs
        return [{"text": t, "batch": len(texts)} for t in texts]

    async def __call__(self, request) -> dict:
        return await self.predict(request.query_params.get("text", ""))
