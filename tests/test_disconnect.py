"""servefleet/_private/edge/disconnect.py: the current task is cancelled when the client
leaves, through the protocol's hook or, on other servers, a watcher task."""

from __future__ import annotations

import asyncio

import pytest

from servefleet._private.edge.disconnect import SCOPE_KEY, CancelOnDisconnect, ConnectionHook


async def _work_until_cancelled(gone_box: list[CancelOnDisconnect], scope, receive) -> str:
    with CancelOnDisconnect(scope, receive) as gone:
        gone_box.append(gone)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return "left" if gone.left else "cancelled"
    return "finished"


async def test_the_hook_cancels_the_armed_request_and_only_it() -> None:
    hook = ConnectionHook()
    boxes: list[CancelOnDisconnect] = []
    task = asyncio.create_task(_work_until_cancelled(boxes, {SCOPE_KEY: hook}, None))
    await asyncio.sleep(0.01)
    assert len(hook.armed) == 1
    hook.lose()
    assert await task == "left"
    assert not hook.armed  # disarmed on the way out
    # Armed on a connection already lost: cancelled at once.
    assert await _work_until_cancelled([], {SCOPE_KEY: hook}, None) == "left"


async def test_a_request_done_before_the_loss_is_not_touched() -> None:
    hook = ConnectionHook()
    with CancelOnDisconnect({SCOPE_KEY: hook}, asyncio.Queue().get) as gone:
        pass
    hook.lose()
    assert not gone.left and not hook.armed


async def test_other_cancels_are_not_taken_for_a_departure() -> None:
    hook = ConnectionHook()
    task = asyncio.create_task(_work_until_cancelled([], {SCOPE_KEY: hook}, None))
    await asyncio.sleep(0.01)
    task.cancel()
    assert await task == "cancelled"


@pytest.mark.parametrize("left", [True, False])
async def test_without_the_hook_a_task_watches_receive(left: bool) -> None:
    messages: asyncio.Queue[dict] = asyncio.Queue()
    task = asyncio.create_task(_work_until_cancelled([], {}, messages.get))
    await asyncio.sleep(0.01)
    if left:
        messages.put_nowait({"type": "http.disconnect"})
        assert await task == "left"
    else:
        task.cancel()
        assert await task == "cancelled"
