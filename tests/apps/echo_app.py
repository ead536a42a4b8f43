"""A deployment for the replica tests: it reports who answered and with what config."""

from __future__ import annotations

import os
import time


class Echo:
    def __init__(self, label: str = "echo", fail: bool = False, unhealthy_dir: str = "",
                 hang: bool = False) -> None:
        if fail:
            raise ValueError("constructor exploded on purpose")
        while hang:  # a constructor that never finishes (a stuck download, a deadlock)
            time.sleep(3600)
        self.label = label
        self.config: object = None
        # A replica turns unhealthy once a file named after its pid appears here.
        self.unhealthy_dir = unhealthy_dir

    def reconfigure(self, config: object) -> None:
        if isinstance(config, dict) and config.get("reject"):
            raise ValueError("config rejected on purpose")
        self.config = config

    def check_health(self) -> None:
        if self.unhealthy_dir and os.path.exists(os.path.join(self.unhealthy_dir,
                                                              str(os.getpid()))):
            raise RuntimeError("told to be unhealthy")

    async def __call__(self, request) -> dict:
        return {"pid": os.getpid(), "label": self.label, "config": self.config}


def hello(request) -> str:
    """A function deployment; `?fail=1` raises (a 500 at the proxy)."""
    if request.query_params.get("fail"):
        raise RuntimeError("told to fail")
    return f"hello {request.query_params.get('name', 'world')}"


def numbers(request):
    """A sync generator: streamed chunk by chunk."""
    for i in range(3):
        yield f"{i}\n"


async def paced(request):
    """An async generator with pauses: each chunk leaves before the next exists."""
    import asyncio

    for i in range(3):
        if i:
            await asyncio.sleep(0.2)
        yield f"{i}\n"


async def ticks(request):
    """An async generator: streamed chunk by chunk."""
    for i in range(3):
        yield f"tick {i}\n".encode()


def _make_starlette_app():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def item(request):
        return JSONResponse({"item": request.path_params["n"]})

    return Starlette(routes=[Route("/items/{n}", item)])


asgi_app = _make_starlette_app()


async def slow(request):
    """Sleeps for ?s= seconds, then answers: for drain tests."""
    import asyncio

    await asyncio.sleep(float(request.query_params.get("s", "1")))
    return "slept"


class Slow:
    """Answers after ?s= seconds; for queueing, overload and timeout tests."""

    async def __call__(self, request):
        import asyncio

        await asyncio.sleep(float(request.query_params.get("s", "0.5")))
        return {"pid": os.getpid(), "request_id": request.headers.get("x-request-id"),
                "headers": sorted(request.headers.keys())}


class Lopsided:
    """The first replica to start (it creates `marker`) answers in 200 ms, the
    others in 20 ms: a replica slow but alive, for passive-health tests."""

    def __init__(self, marker: str) -> None:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            self.slow = True
        except FileExistsError:
            self.slow = False

    async def __call__(self, request):
        import asyncio

        await asyncio.sleep(0.2 if self.slow else 0.02)
        return {"slow": self.slow}


def noop(request) -> str:
    """A sync no-op: each request takes a thread-pool hop in the replica."""
    return "ok"


async def async_noop(request) -> str:
    """The cheapest deployment, the same handler as the raw app's: for data-plane
    benchmarks."""
    return "ok"


class Sleeper:
    """Sleeps ?s= seconds; if cancelled first, leaves a file named after the request id."""

    def __init__(self, marks: str) -> None:
        self.marks = marks

    async def __call__(self, request):
        import asyncio

        try:
            await asyncio.sleep(float(request.query_params.get("s", "5")))
        except asyncio.CancelledError:
            with open(os.path.join(self.marks, request.headers["x-request-id"]), "w"):
                pass
            raise
        return "slept"
