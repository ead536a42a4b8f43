"""Constructors that need the replica's event loop (tests/test_replica_constructor.py)."""

import asyncio
import time


class StartsATask:
    """A plain __init__ that starts a background task on the running loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.ticks = 0
        self.task = asyncio.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0.01)

    async def __call__(self) -> int:
        return self.ticks


class AwaitsInInit:
    async def __init__(self, value: int) -> None:  # type: ignore[misc]  # Ray allows it
        await asyncio.sleep(0.01)
        self.value = value
        self.loop = asyncio.get_running_loop()

    def __call__(self) -> int:
        return self.value


class Slow:
    def __init__(self, seconds: float) -> None:
        time.sleep(seconds)

    def __call__(self) -> str:
        return "ready"
