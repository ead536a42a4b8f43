"""Multiplexed models (tests/test_multiplex.py): each answer names the model,
the replica (pid) and how many loads that replica did so far."""

from __future__ import annotations

import os

from servefleet import get_multiplexed_model_id, multiplexed


class Models:
    def __init__(self) -> None:
        self.loads = 0

    @multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str) -> str:
        self.loads += 1
        return f"model-{model_id}"

    async def __call__(self, request) -> dict:
        model = await self.get_model(get_multiplexed_model_id())
        return {"model": model.removeprefix("model-"), "replica": os.getpid(),
                "loads": self.loads}
