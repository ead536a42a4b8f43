"""One Watch stream (watch.proto), after go-control-plane's sotw server loop.

Send what the client lacks, then wait for a change or the heartbeat, until
the client leaves or this controller stops leading. Each pass after the first
looks only at the keys changed since the last (Publisher.diff's `since`), and
the heartbeat timer lives as long as the stream (watch.Heartbeat): a change
costs a stream its wake-up and its messages, about as little as gRPC allows
(bench/watch_fanout.py measures it against a bare grpc.aio server).
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable

from servefleet.v1 import watch_pb2

from .watch import (
    DEFAULT_HEARTBEAT_S,
    MAX_HEARTBEAT_S,
    MIN_HEARTBEAT_S,
    Heartbeat,
    Publisher,
    Watcher,
)

_HEARTBEAT = watch_pb2.WatchResponse(heartbeat=watch_pb2.Heartbeat())


async def serve_watch(publisher: Publisher, request: watch_pb2.WatchRequest,
                      still_leading: Callable[[], bool]) -> AsyncIterator[watch_pb2.WatchResponse]:
    """One Watch stream; ends (the caller aborts UNAVAILABLE) once leadership is lost."""
    known = dict(request.known)
    patterns = sorted(known)
    interval = min(MAX_HEARTBEAT_S, max(MIN_HEARTBEAT_S, request.heartbeat_s
                                        or DEFAULT_HEARTBEAT_S))
    slot = id(known)
    watcher = Watcher(request.watcher_id, request.kind, request.address, interval)
    publisher.watchers[slot] = watcher
    # Jitter keeps a thousand idle streams from beating in step.
    beat = Heartbeat(interval * random.uniform(0.8, 1.0))
    try:
        seen: int | None = None
        while not publisher.closed and still_leading():
            since, seen = seen, publisher.generation
            sent = False
            for response in publisher.diff(patterns, known, since):
                yield response
                sent = True
                if publisher.closed:
                    return
            if since is None and not sent:
                # Nothing stale: say so at once, so the client knows it is live.
                yield _HEARTBEAT
                sent = True
            if sent:
                watcher.last_sent = time.time()
                beat.sent()
            if not await publisher.next_change(seen, beat):
                if publisher.closed:
                    return
                yield _HEARTBEAT
                watcher.last_sent = time.time()
                beat.sent()
    finally:
        beat.stop()
        publisher.watchers.pop(slot, None)
