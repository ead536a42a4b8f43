"""Ending a stream the controller serves from outside its handler.

A handler suspended in a write, because its client does not read, runs no
code of its own until the write completes. `cut_off` ends such a call from
another place (the stream's request reader, a timer): it cancels the
handler's task, so everything the handler holds is freed at once, and sends
the status. gRPC offers a server no way to reset one stream: the status
waits behind the messages the client has not read, and the client gets it
after them; until it reads or leaves, the call holds only what gRPC's core
buffers for it (the pending message, a flow-control window of requests).

The abort that sends the status keeps its error with the call, traceback
and all: the traceback would keep alive the frames that called abort (a
queue of requests, the last request), in a cycle with the call that only a
full collection frees. The abort runs in a task of its own for that reason,
and the traceback is cleared.

`close_requests` ends the reading of a request stream its handler stopped
reading in the middle: grpc.aio's request iterator, left suspended after
handing out a message, keeps that message for good (about 2 MB per refused
StreamLoad stream of a report naming 10,001 deployments; measured).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc

# The aborts under way, held until they finish (the loop keeps only weak
# references to tasks): each until its client reads the status or leaves.
_aborting: set[asyncio.Task[None]] = set()


def cut_off(handler: asyncio.Task[Any], context: grpc.aio.ServicerContext,
            code: grpc.StatusCode, details: str) -> None:
    """End the call of `handler` (its task) with `code` and `details`."""
    if not context.done():
        task = asyncio.get_running_loop().create_task(_abort(context, code, details))
        _aborting.add(task)
        task.add_done_callback(_aborting.discard)
    handler.cancel()


async def _abort(context: grpc.aio.ServicerContext, code: grpc.StatusCode,
                 details: str) -> None:
    try:
        await context.abort(code, details)
    except grpc.aio.AbortError as e:
        e.__traceback__ = None
    except grpc.aio.BaseError:
        pass  # the client left before the status reached it: nothing to tell


async def close_requests(requests: AsyncIterator[Any]) -> None:
    """Stop reading `requests` (the iterator a handler's `async for` took)."""
    aclose = getattr(requests, "aclose", None)
    if aclose is not None:
        # RuntimeError: still being read (a task awaits its next message).
        with contextlib.suppress(RuntimeError):
            await aclose()
