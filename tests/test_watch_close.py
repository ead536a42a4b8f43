"""Closing a Watch client ends its task even when the cancel is lost.

asyncio.wait_for (Python 3.11) returns the inner call's own error when the
call fails in the same turn of the loop as the outer task's cancel: the
stream's loop then sees an AioRpcError, not CancelledError. Before, it
reconnected forever and close() never returned: a replica SIGTERMed
together with its controller stayed up (seen once, 2026-12-06).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from servefleet._private import watch_client
from servefleet._private.watch_client import WatchClient


class _FailsOnCue:
    """A Watch stream that says nothing until `fail` is set, then fails."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = asyncio.Event()

    def __aiter__(self) -> _FailsOnCue:
        return self

    async def __anext__(self) -> Any:
        self.calls += 1
        await self.fail.wait()
        raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                   grpc.aio.Metadata(), "the controller went away")


async def test_close_returns_when_the_stream_fails_as_it_is_cancelled(monkeypatch) -> None:
    stream = _FailsOnCue()

    class Stub:
        def __init__(self, channel: Any) -> None:
            pass

        def Watch(self, request: Any, metadata: Any = None) -> _FailsOnCue:
            return stream

    monkeypatch.setattr(watch_client.controller_pb2_grpc, "ControllerServiceStub", Stub)
    client = WatchClient("127.0.0.1:1", ["routes"], heartbeat_s=60)
    client.start()
    while stream.calls == 0:
        await asyncio.sleep(0.01)
    task = client._task
    assert task is not None
    # The stream fails in the same turn of the loop as the cancel: wait_for
    # hands the loop the stream's error and the cancel is gone.
    stream.fail.set()
    await asyncio.wait_for(client.close(), 5)
    assert task.done() and stream.calls == 1  # it did not go round again


@pytest.mark.parametrize("kind", ["sleeping", "streaming"])
async def test_close_ends_an_ordinary_client(kind: str) -> None:
    # Nothing listens on port 1: the client is between attempts or in one.
    client = WatchClient("127.0.0.1:1", ["routes"], heartbeat_s=60)
    client.start()
    await asyncio.sleep(0.3 if kind == "sleeping" else 0)
    task = client._task
    await asyncio.wait_for(client.close(), 5)
    assert task is not None and task.done()
