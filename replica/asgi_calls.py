"""An ASGI deployment's call, cancelled when its caller leaves before the answer.

A plain deployment's code is cancelled when the proxy or handle that called
it goes away (http.py, `_call_until_disconnect`). An ASGI app (an ingress:
FastAPI, Starlette, servefleet.llm's OpenAI ingress) learns of a departure
only if it reads `receive()`, which an endpoint rarely does once it has the
body; so it ran on, and its request kept its `max_ongoing_requests` slot,
until it was done: the handle calls it made went on waiting (in a model's
batch queue, say), and new requests met a full replica (503) all that time.
As in Ray Serve, the app's task is cancelled instead, at its next await;
the handle calls it awaits close with it, and the replicas they reached
cancel them in turn.

Through servefleet's own HTTP protocol only (the connection's hook,
edge/disconnect.py: nothing of the app's `receive()` is read here); and only
until the answer is complete: what the app runs after it (a background
task) runs to its end, whatever the connection does then.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from servefleet._private.edge.disconnect import SCOPE_KEY, ConnectionHook

from .user_calls import traced

logger = logging.getLogger(__name__)


async def call_asgi(app: ASGIApp, scope: Scope, receive: Receive, send: Send,
                    request_id: str) -> None:
    """Run `app` for one HTTP request; cancel it if its caller leaves first."""
    hook: ConnectionHook | None = scope.get(SCOPE_KEY)
    if hook is None:  # another server (a test's): the app watches receive() itself
        await traced(app(scope, receive, send))
        return
    task = asyncio.current_task()
    assert task is not None
    left = False

    def leave() -> None:
        nonlocal left
        left = True
        task.cancel()

    async def answering(message: Message) -> None:
        await send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            hook.armed.discard(leave)  # answered: the rest is the app's own business

    if hook.lost:
        logger.info("request %s: the caller went away before its app ran", request_id)
        return
    hook.armed.add(leave)
    try:
        await traced(app(scope, receive, answering))
    except asyncio.CancelledError:
        if not left:
            raise  # cancelled from outside (shutdown)
    finally:
        hook.armed.discard(leave)
    if left:
        # Ours is handled (an app that caught it itself, as the OpenAI
        # ingress does, returned): no cancel is left pending on the task.
        task.uncancel()
        logger.info("request %s: the caller went away; cancelled", request_id)
