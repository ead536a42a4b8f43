"""A second event loop, in a thread of its own, for the replica's control server.

User `async def` code runs on the replica's main loop, and a handler that
blocks it (a synchronous model call inside `async def`, a large body parsed
there) would hold the controller's health checks too: the controller would
replace a replica that is only busy, losing its loaded model. So the gRPC
control server (control.py: GetMetadata, CheckHealth, Reconfigure, Drain)
runs here instead, answering while the main loop is held; what has to run
on the main loop (the user's async check_health and reconfigure, the drain)
is handed to it with `on_main`.

The loop is asyncio's own, not uvloop (one uvloop per process is what uvloop
is tested with); it does little: a few calls a second and the sampler of the
main loop's watch (loop_watch.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import grpc

T = TypeVar("T")


class ControlLoop:
    def __init__(self, main: asyncio.AbstractEventLoop) -> None:
        self.main = main
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="replica-control",
                                        daemon=True)
        self._server: grpc.aio.Server | None = None

    async def start(self, build: Callable[[], grpc.aio.Server]) -> None:
        """Start the thread, then `build()` the server on its loop and start it.
        Raises what `build` raises (RuntimeError: a port that cannot be bound),
        with the thread stopped again."""
        self._thread.start()
        try:
            await self._on_control(self._serve(build))
        except BaseException:
            self._halt()
            raise

    async def _serve(self, build: Callable[[], grpc.aio.Server]) -> None:
        server = build()  # here: a grpc.aio server belongs to the loop it is made on
        await server.start()
        self._server = server

    def repeat(self, period_s: float, fn: Callable[[], None]) -> None:
        """Call `fn` every `period_s` on the control loop (from any thread)."""
        def tick() -> None:
            fn()
            self._loop.call_later(period_s, tick)
        self._loop.call_soon_threadsafe(self._loop.call_later, period_s, tick)

    async def on_main(self, work: Coroutine[Any, Any, T]) -> T:
        """Await `work` run on the main loop (call from the control loop)."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(work, self.main))

    def call_on_main(self, fn: Callable[..., Any], *args: Any) -> None:
        """Call `fn(*args)` on the main loop, without waiting."""
        self.main.call_soon_threadsafe(fn, *args)

    async def _on_control(self, work: Coroutine[Any, Any, T]) -> T:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        return await asyncio.wrap_future(future)

    async def stop(self, grace_s: float) -> None:
        """Stop the server (calls in flight get `grace_s`), then the thread."""
        if self._server is not None:
            await self._on_control(self._server.stop(grace_s))
        self._halt()

    def _halt(self) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
