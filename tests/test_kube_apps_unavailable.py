"""The ServeApplication watch while the API server is not ready: a 429
("storage is (re)initializing", while its watch cache fills after a start
or a new CRD), a 5xx or a refused connection, on the listing or as the
watch's ERROR event, is retried with the loop's backoff and logged as a
warning line, never a traceback, and the watch goes on once the API server
answers. The real reconciler on the real loop, against an API in memory."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from typing import Any

from test_kube_apps import NS

from servefleet.controller.clock import Clock
from servefleet.controller.kube_apps.reconciler import ServeApplicationReconciler
from servefleet.controller.reconcile.loop import Backoff, ReconcileLoop
from servefleet.controller.runtime.kubernetes_api import ApiError

INITIALIZING = "storage is (re)initializing"


class NotReadyYet:
    """Refuses `failures` listings in turn, then lists; its first watch ends
    with a 429 ERROR event, the next ones stay open."""

    namespace = NS

    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.lists = 0
        self.watches = 0

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        if self.failures:
            raise self.failures.pop(0)
        return [], str(10 + self.lists)

    async def watch(self, resource_version: str) -> AsyncGenerator[dict[str, Any], None]:
        self.watches += 1
        if self.watches == 1:
            yield {"type": "ERROR", "object": {"kind": "Status", "code": 429,
                                               "message": INITIALIZING}}
        await asyncio.Event().wait()

    async def write_status(self, obj: dict[str, Any]) -> None:
        pass


class Owners:
    loaded, records = True, {}  # type: ignore[var-annotated]


class Applications:
    def live(self) -> list[Any]:
        return []


async def test_an_api_server_not_ready_is_waited_out_with_warnings(caplog) -> None:
    api = NotReadyYet([ApiError(429, INITIALIZING), ApiError(503, "etcd leader changed"),
                       ConnectionRefusedError(111, "Connection refused")])
    loop = ReconcileLoop(Clock(), period_s=0.01, backoff=Backoff(0.01, 0.05))
    reconciler = ServeApplicationReconciler(api, Owners(), Applications(),  # type: ignore[arg-type]
                                            list, loop, Clock())
    loop.add(reconciler)
    caplog.set_level(logging.INFO)
    running = asyncio.create_task(loop.run())
    try:
        async with asyncio.timeout(10):
            # Three refused listings, one listing, its watch's 429, a listing again.
            while api.lists < 5 or api.watches < 2:
                await asyncio.sleep(0.01)
        assert not running.done()
        assert reconciler.cache.synced and reconciler.cache.resource_version == "15"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    warned = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for said in (f"429: {INITIALIZING}", "503: etcd leader changed", "Connection refused"):
        assert said in warned, warned
