"""One Watch stream (watch.proto), after go-control-plane's sotw server loop.

Send what the client lacks, then wait for a change or the heartbeat, until
the client leaves or this controller stops leading. Each pass after the first
looks only at the keys changed since the last (Publisher.diff's `since`), and
the heartbeat timer lives as long as the stream (watch.Heartbeat): a change
costs a stream its wake-up and its messages, about as little as gRPC allows
(bench/watch_fanout.py measures it against a bare grpc.aio server).

A Watch stream queues nothing of its own: a write waits for the client to
read (gRPC's flow control), and changes meanwhile are only the publisher's
(the stream sends what its client lacks once it writes again). A client
that does not read holds its stream, so a stream whose write has not
completed for STALL_HEARTBEATS heartbeats (at least MIN_STALL_S) is cut
off with RESOURCE_EXHAUSTED, and what it held is freed (stream_end.py).
The heartbeat's timer notices it (watch.Heartbeat.stall_after); a change
costs a stream one counter increment per message for it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator, Callable

import grpc

from servefleet.v1 import watch_pb2

from .errors import one_line
from .stream_end import cut_off
from .watch import (
    DEFAULT_HEARTBEAT_S,
    MAX_HEARTBEAT_S,
    MIN_HEARTBEAT_S,
    Heartbeat,
    Publisher,
    Watcher,
)

logger = logging.getLogger(__name__)
_HEARTBEAT = watch_pb2.WatchResponse(heartbeat=watch_pb2.Heartbeat())
# A stream is cut off when none of its writes has completed for this many of
# its heartbeats: its client does not read. One that reads would itself have
# reconnected by then (watch_client.py gives up on a stream silent for three).
STALL_HEARTBEATS = 3
# ... and for at least this long, well above a write's wait in a busy
# fan-out (p99 under 0.1 s at 1,000 streams, docs/watch-streams.md), so a
# controller that is slow for a moment cuts no reading client off.
MIN_STALL_S = 2.0


async def serve_watch(publisher: Publisher, request: watch_pb2.WatchRequest,
                      still_leading: Callable[[], bool],
                      context: grpc.aio.ServicerContext | None = None
                      ) -> AsyncIterator[watch_pb2.WatchResponse]:
    """One Watch stream; ends (the caller aborts UNAVAILABLE) once leadership is lost.
    With `context`, a stream whose client does not read is cut off."""
    known = dict(request.known)
    patterns = sorted(known)
    waits_on = tuple(patterns)  # its wake-ups (Publisher.next_change)
    interval = min(MAX_HEARTBEAT_S, max(MIN_HEARTBEAT_S, request.heartbeat_s
                                        or DEFAULT_HEARTBEAT_S))
    slot = id(known)
    watcher = Watcher(request.watcher_id, request.kind, request.address, interval)
    publisher.watchers[slot] = watcher
    # Jitter keeps a thousand idle streams from beating in step.
    beat = Heartbeat(interval * random.uniform(0.8, 1.0))
    if context is not None:
        stall_s = max(STALL_HEARTBEATS * interval, MIN_STALL_S)
        handler = asyncio.current_task()
        assert handler is not None

        def stalled() -> None:
            logger.warning("cut off the Watch stream of %s from %s: nothing written for "
                           "%g s, it does not read its stream", one_line(watcher.watcher_id),
                           context.peer(), stall_s)
            cut_off(handler, context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the client does not read its stream: nothing written for {stall_s:g} s")

        beat.stall_after(stall_s, stalled)
    beat.sent()  # the timer runs from the start: a first pass can stall too
    try:
        seen: int | None = None
        while not publisher.closed and still_leading():
            since, seen = seen, publisher.generation
            sent = False
            for response in publisher.diff(patterns, known, since):
                yield response
                beat.writes += 1
                sent = True
                if publisher.closed:
                    return
            if since is None and not sent:
                # Nothing stale: say so at once, so the client knows it is live.
                yield _HEARTBEAT
                beat.writes += 1
                sent = True
            if sent:
                watcher.last_sent = time.time()
                beat.sent()
            if not await publisher.next_change(seen, beat, waits_on):
                if publisher.closed:
                    return
                yield _HEARTBEAT
                beat.writes += 1
                watcher.last_sent = time.time()
                beat.sent()
    finally:
        beat.stop()
        publisher.watchers.pop(slot, None)
