"""replica/asgi_calls.py: an ASGI deployment's task is cancelled when its
caller's connection is lost before the answer is complete, and only then."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

from servefleet._private.edge.disconnect import SCOPE_KEY, CancelOnDisconnect, ConnectionHook
from servefleet.replica.asgi_calls import call_asgi


def scope(hook: ConnectionHook | None) -> dict[str, Any]:
    return {"type": "http", SCOPE_KEY: hook} if hook is not None else {"type": "http"}


async def nothing() -> dict[str, Any]:
    await asyncio.Event().wait()
    return {}


class App:
    """Answers after `before` is set, then runs on until `after` is set."""

    def __init__(self, answer: bool = True) -> None:
        self.answer = answer
        self.before, self.after = asyncio.Event(), asyncio.Event()
        self.started = asyncio.Event()
        self.ended = ""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.started.set()
        try:
            await self.before.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            await self.after.wait()  # a background task, after the answer
            self.ended = "finished"
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise


async def sent(message: MutableMapping[str, Any]) -> None:
    pass


async def test_a_lost_caller_cancels_the_app_before_its_answer() -> None:
    hook, app = ConnectionHook(), App()
    call = asyncio.create_task(call_asgi(app, scope(hook), nothing, sent, "r1"))
    await app.started.wait()
    hook.lose()
    await call  # returns: the departure is not an error of the request
    assert app.ended == "cancelled" and not hook.armed
    assert call.cancelling() == 0


async def test_what_runs_after_the_answer_is_not_cancelled() -> None:
    hook, app = ConnectionHook(), App()
    call = asyncio.create_task(call_asgi(app, scope(hook), nothing, sent, "r2"))
    app.before.set()
    await asyncio.sleep(0.01)
    assert not hook.armed  # answered: disarmed
    hook.lose()  # the proxy closes its idle connection, say
    app.after.set()
    await call
    assert app.ended == "finished"


async def test_other_cancels_go_through() -> None:
    hook, app = ConnectionHook(), App()
    call = asyncio.create_task(call_asgi(app, scope(hook), nothing, sent, "r3"))
    await app.started.wait()
    call.cancel()  # shutdown, say
    try:
        await call
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("a cancel from outside must reach the caller")
    assert app.ended == "cancelled" and not hook.armed


async def test_an_app_that_handles_the_departure_itself_leaves_no_cancel_pending() -> None:
    """The OpenAI ingress watches the hook too and answers 499: the task must
    not stay cancelling (a later asyncio.timeout in it would misfire)."""
    hook = ConnectionHook()
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        with CancelOnDisconnect(scope, receive) as gone:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                assert gone.left
                asyncio.current_task().uncancel()  # type: ignore[union-attr]
                seen.append("left")

    async def request() -> int:
        await call_asgi(app, scope(hook), nothing, sent, "r4")
        return asyncio.current_task().cancelling()  # type: ignore[union-attr]

    call = asyncio.create_task(request())
    await asyncio.sleep(0.01)
    hook.lose()
    assert await call == 0 and seen == ["left"]


async def test_without_the_hook_the_app_runs_as_it_is() -> None:
    app = App()
    app.before.set()
    app.after.set()
    await call_asgi(app, scope(None), nothing, sent, "r5")
    assert app.ended == "finished"


async def test_a_connection_lost_before_the_call_runs_nothing() -> None:
    hook, app = ConnectionHook(), App()
    hook.lose()
    await call_asgi(app, scope(hook), nothing, sent, "r6")
    assert not app.started.is_set()
