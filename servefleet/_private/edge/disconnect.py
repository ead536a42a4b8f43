"""Cancelling a request's work when its client disconnects.

ASGI tells an app that its client left only through `receive()`, so the usual
way is a task per request that waits on it: a task, a future and two more
loop passes for every request, though clients rarely leave. servefleet's own
HTTP protocol (http_protocol.py) offers a hook instead: each request's scope
carries its connection's `ConnectionHook`, and the protocol calls what is
armed on it when the connection is lost. `CancelOnDisconnect` uses the hook
when the server is ours, and the watcher task otherwise (another ASGI
server, a test client).

Used by the proxy (a client that leaves cancels the forwarding, which closes
the connection to the replica) and by the replica (that closed connection
cancels the user's code).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

SCOPE_KEY = "servefleet.connection"


class ConnectionHook:
    """One per connection: callbacks to run once it is lost."""

    __slots__ = ("armed", "lost")

    def __init__(self) -> None:
        self.armed: set[Callable[[], None]] = set()
        self.lost = False

    def lose(self) -> None:
        self.lost = True
        armed, self.armed = self.armed, set()
        for callback in armed:
            callback()


class CancelOnDisconnect:
    """Within `with`, the current task is cancelled when the client
    disconnects; `left` is then True (the caller tells that cancel from
    others by it). `after`: start watching only once it is set (a body still
    being read notices a departure itself); the hook ignores it, as a cancel
    while reading is handled the same way."""

    __slots__ = ("_after", "_hook", "_receive", "_task", "_watcher", "left")

    def __init__(self, scope: Mapping[str, Any], receive: Callable[[], Any],
                 after: asyncio.Event | None = None) -> None:
        self._hook: ConnectionHook | None = scope.get(SCOPE_KEY)
        self._receive = receive
        self._after = after
        self._task: asyncio.Task[Any] | None = None
        self._watcher: asyncio.Future[None] | None = None
        self.left = False

    def __enter__(self) -> CancelOnDisconnect:
        self._task = asyncio.current_task()
        if self._hook is None:
            self._watcher = asyncio.ensure_future(self._watch())
        elif self._hook.lost:
            self._leave()
        else:
            self._hook.armed.add(self._leave)  # bound methods compare by (self, function)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._hook is not None:
            self._hook.armed.discard(self._leave)
        elif self._watcher is not None:
            self._watcher.cancel()
        self._task = None  # no cycle through the task (garbage the collector must find)

    def _leave(self) -> None:
        self.left = True
        if self._task is not None:
            self._task.cancel()

    async def _watch(self) -> None:
        if self._after is not None:
            await self._after.wait()
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._leave()
