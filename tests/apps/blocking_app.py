"""Handlers that block their replica's event loop, as ML code often does:
a synchronous model call inside `async def`, a large JSON body parsed and
handed to another deployment."""

from __future__ import annotations

import os
import time

from servefleet import deployment


class Blocking:
    """`?s=5`: sleeps that long inside `async def`, holding the event loop."""

    async def __call__(self, request) -> dict:
        time.sleep(float(request.query_params.get("s", "5")))  # noqa: ASYNC251
        return {"pid": os.getpid()}


@deployment
class Counter:
    async def __call__(self, rows: list) -> int:
        return sum(len(row) for row in rows)


@deployment
class Front:
    """Parses a JSON body (a list of rows) and has Counter count its cells."""

    def __init__(self, counter) -> None:
        self.counter = counter

    async def __call__(self, request) -> dict:
        rows = await request.json()
        return {"cells": await self.counter.remote(rows)}


big = Front.bind(Counter.bind())
