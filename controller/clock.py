"""The clock the controller reads, injected so decisions run under a fake one in tests."""

from __future__ import annotations

import asyncio
import time


class Clock:
    """Real time: `monotonic` for intervals and deadlines, `time` for timestamps."""

    def monotonic(self) -> float:
        return time.monotonic()

    def time(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
