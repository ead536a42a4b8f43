"""HTTP from tests: steady load from a background thread, for the tests that
change replicas (rollouts, autoscaling) while requests flow, and a probe."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx


def answers(url: str, timeout: float = 5) -> bool:
    """Whether `url` answers 200 now (False on any HTTP error)."""
    try:
        return httpx.get(url, timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


class SteadyLoad:
    """Requests through the proxy back to back from `concurrency` clients in a
    thread, counting non-2xx answers and timing each."""

    def __init__(self, url: str, concurrency: int = 4) -> None:
        self.url = url
        self.concurrency = concurrency
        self.ok = 0
        self.bad: list[str] = []
        self.labels: set[str] = set()
        self.latencies: list[float] = []  # seconds, of the 2xx answers
        # Every request: when it was sent (time.perf_counter), how long it took
        # to answer or fail, and whether it got a 2xx.
        self.requests: list[tuple[float, float, bool]] = []
        self._stop = False
        self._thread: threading.Thread | None = None

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            async def worker() -> None:
                while not self._stop:
                    start = time.perf_counter()
                    try:
                        reply = await http.get(self.url)
                    except httpx.HTTPError as e:
                        self.bad.append(f"{type(e).__name__}: {e}")
                        self.requests.append((start, time.perf_counter() - start, False))
                        continue
                    ok = reply.status_code // 100 == 2
                    self.requests.append((start, time.perf_counter() - start, ok))
                    if ok:
                        self.ok += 1
                        self.latencies.append(time.perf_counter() - start)
                        self.labels.add(reply.json().get("label", ""))
                    else:
                        self.bad.append(f"{reply.status_code} {reply.text[:100]}")

            await asyncio.gather(*[worker() for _ in range(self.concurrency)])

    def __enter__(self) -> SteadyLoad:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join(60)
