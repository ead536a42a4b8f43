"""Running an ASGI app's lifespan (startup and shutdown handlers) without a server.

An ASGI server runs an app's lifespan once around serving it. An ingress
deployment's app (servefleet/_private/applications/ingress.py) is not the app the replica's server
runs (that is the replica's own, replica/http.py), so its lifespan is driven
here: `startup()` sends `lifespan.startup` and waits for the app's answer,
`shutdown()` sends `lifespan.shutdown` and waits likewise. Between the two
the app's lifespan coroutine stays alive in a task, as under uvicorn, so a
FastAPI `lifespan=` context manager is entered at startup and left at
shutdown.

What the app answers decides what happens, as the ASGI lifespan spec says:

- `lifespan.startup.complete`: started; the lifespan `state` the app filled
  (FastAPI's `yield {...}`) is returned, for each request's `scope["state"]`;
- `lifespan.startup.failed` (a startup handler raised): `LifespanError` with
  the app's message;
- the app raises or returns before answering: it does not speak lifespan
  (a bare ASGI function, say); that is not an error, there is nothing to run.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

from starlette.types import ASGIApp, Message

logger = logging.getLogger(__name__)

_ENDED: Message = {"type": "servefleet.lifespan.ended"}


class LifespanError(RuntimeError):
    """The app's startup or shutdown handlers failed."""


class Lifespan:
    """One run of an app's lifespan: `startup()` once, then `shutdown()` once."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._to_app: asyncio.Queue[Message] = asyncio.Queue()
        self._from_app: asyncio.Queue[Message] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.state: dict[str, Any] = {}
        self.supported = True

    async def startup(self) -> dict[str, Any]:
        """Run the startup handlers; the lifespan state they set. LifespanError if they fail."""
        if self._task is not None:
            raise RuntimeError("this lifespan was started already")
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": self.state}
        # A context of its own: the lifespan outlives whichever request started it,
        # and must not carry that request's id into its log lines.
        self._task = asyncio.create_task(self._run(scope), context=contextvars.Context())
        await self._to_app.put({"type": "lifespan.startup"})
        answer = await self._from_app.get()
        if answer["type"] == "lifespan.startup.failed":
            raise LifespanError(f"the app's startup failed: {_last_line(answer)}")
        if answer is _ENDED:
            self.supported = False
            logger.debug("the app does not run a lifespan; no startup to run")
        return self.state

    async def shutdown(self) -> None:
        """Run the shutdown handlers (nothing if startup never ran or the app has
        no lifespan). LifespanError if they fail."""
        if self._task is None or self._task.done():
            return
        await self._to_app.put({"type": "lifespan.shutdown"})
        answer = await self._from_app.get()
        await asyncio.wait({self._task})
        if answer["type"] == "lifespan.shutdown.failed":
            raise LifespanError(f"the app's shutdown failed: {_last_line(answer)}")

    async def _run(self, scope: dict[str, Any]) -> None:
        try:
            await self._app(scope, self._to_app.get, self._from_app.put)
        except Exception as e:  # an app without lifespan support raises on the scope type
            logger.debug("the app's lifespan ended with %s: %s", type(e).__name__, e)
        finally:
            self._from_app.put_nowait(_ENDED)


def _last_line(answer: Message) -> str:
    """The error of a failure message (Starlette sends the whole traceback: logged)."""
    text = str(answer.get("message") or "").strip()
    if "\n" in text:
        logger.error("the app's lifespan handlers failed:\n%s", text)
    return text.splitlines()[-1] if text else "(no message)"
