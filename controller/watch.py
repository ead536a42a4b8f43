"""Config snapshots and the Watch stream that carries them (watch.proto).

`Publisher` holds the current snapshot of every key with its id, a digest of
its content (after go-control-plane's versioned snapshots: immutable values,
compared by version). Publishing a value equal to the current one changes
nothing; a different one bumps a generation counter and wakes every waiting
stream at once. Because ids are content digests, every leader computes the
same id for the same state, and a client resuming after a failover is sent
only what changed. A change wakes only the streams whose patterns match its
key (a replica set's change does not wake the replicas' own streams, which
watch the routes and their config): the streams are grouped by their
patterns, and each group is matched once per change.

`StatePublisher` (state_publisher.py) turns the leader's state into
snapshots.

`serve_watch` (watch_stream.py) is one stream.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from servefleet.v1 import watch_pb2

DEFAULT_HEARTBEAT_S = 5.0
MIN_HEARTBEAT_S, MAX_HEARTBEAT_S = 0.1, 60.0
MAX_WATCH_KEYS = 10_000
# Changes remembered for diff(since=...); a stream further behind diffs in full.
CHANGE_LOG_LENGTH = 4096


def _digest(message: Message) -> str:
    return hashlib.sha256(message.SerializeToString(deterministic=True)).hexdigest()[:16]


@dataclass
class Watcher:
    watcher_id: str
    kind: watch_pb2.WatcherKind
    address: str
    heartbeat_s: float
    # Wall-clock time of the last message written to it.
    last_sent: float = 0.0

    def healthy(self, now: float) -> bool:
        return now - self.last_sent < 3 * self.heartbeat_s


class Heartbeat:
    """A stream's heartbeat timer: due `interval` after the last message sent.

    The timer is kept across changes and moved only when it fires early (a
    message was sent since): creating and cancelling a timer per stream per
    change was a fifth of a 1,000-stream fan-out's time.

    With `stall_after`, the same timer notices a stream whose write does not
    complete: fired while the stream is not waiting for a change, it finds
    the stream inside a write (its only other await) and looks again an
    interval later. Once no write has completed (the stream counts them in
    `writes`) for `stall_s` and two looks (one late timer, with the write's
    completion queued behind it, is no stall), it calls `on_stall`. Nothing
    is added per change but the count."""

    __slots__ = ("_looks", "_loop", "_on_stall", "_stall_s", "_stalled_since", "_timer",
                 "_writes_seen", "due", "interval", "waiter", "writes")

    def __init__(self, interval: float) -> None:
        self._loop = asyncio.get_running_loop()
        self.interval = interval
        self.due = 0.0
        # The future of the wait under way, resolved False when the beat is due.
        self.waiter: asyncio.Future[bool] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.writes, self._writes_seen, self._looks = 0, -1, 0
        self._stall_s, self._stalled_since = 0.0, 0.0
        self._on_stall: Callable[[], None] | None = None

    def stall_after(self, stall_s: float, on_stall: Callable[[], None]) -> None:
        """Call `on_stall` once no write of the stream has completed for `stall_s`."""
        self._stall_s, self._on_stall = stall_s, on_stall

    def sent(self) -> None:
        """A message went out: the next beat is due `interval` from now."""
        self.due = self._loop.time() + self.interval
        if self._timer is None:
            self._timer = self._loop.call_at(self.due, self._fire)

    def _fire(self) -> None:
        if self.waiter is None and self._on_stall is not None:
            self._look()
            return
        self._looks = 0
        if self._loop.time() < self.due:
            self._timer = self._loop.call_at(self.due, self._fire)
            return
        self._timer = None
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(False)

    def _look(self) -> None:
        """The stream is inside a write: has one completed since the last look?"""
        assert self._on_stall is not None
        now = self._loop.time()
        if self.writes != self._writes_seen:
            self._writes_seen, self._stalled_since, self._looks = self.writes, now, 0
        else:
            self._looks += 1
            if self._looks >= 2 and now - self._stalled_since >= self._stall_s:
                self._timer = None
                self._on_stall()
                return
        self._timer = self._loop.call_at(now + self.interval, self._fire)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Publisher:
    def __init__(self) -> None:
        self._snapshots: dict[str, watch_pb2.Snapshot] = {}
        # The response carrying each current snapshot, built once and shared by
        # every stream: building one per stream copies the whole snapshot, which
        # at 1,000 streams made fan-out p99 87 ms instead of 60 (bench/watch_fanout.py).
        # Serializing once as well (bytes through a pass-through serializer)
        # measured no better, so the generated handlers are used as they are.
        self._responses: dict[str, watch_pb2.WatchResponse] = {}
        self._generation = 0
        # (generation, key) of the latest changes, for diff(since=...).
        self._log: deque[tuple[int, str]] = deque(maxlen=CHANGE_LOG_LENGTH)
        self._last_answer: tuple[tuple[int, int], list[str]] = ((-1, -1), [])
        # One future per waiting stream, resolved True on a change, False
        # when its own timer (its heartbeat) fires first; grouped by the
        # stream's patterns (() for a wait on every key).
        self._waiters: dict[tuple[str, ...], set[asyncio.Future[bool]]] = {}
        self.watchers: dict[int, Watcher] = {}
        # Set when the term that owns this publisher ends: its streams stop.
        self.closed = False

    @property
    def generation(self) -> int:
        return self._generation

    def publish(self, key: str, **payload: Any) -> None:
        """Make `payload` (one of routes=, replicas=, config=) the value of `key`."""
        ((field, message),) = payload.items()
        snapshot_id = _digest(message)
        current = self._snapshots.get(key)
        if current is not None and current.snapshot_id == snapshot_id:
            return
        snapshot = watch_pb2.Snapshot(key=key, snapshot_id=snapshot_id, **{field: message})
        self._snapshots[key] = snapshot
        self._responses[key] = watch_pb2.WatchResponse(snapshot=snapshot)
        self._bump(key)

    def watching(self, watcher_id: str) -> bool:
        """Whether a watcher with this id has a stream open."""
        return any(w.watcher_id == watcher_id for w in self.watchers.values())

    def keys(self) -> list[str]:
        return list(self._snapshots)

    def snapshot(self, key: str) -> watch_pb2.Snapshot | None:
        """The current snapshot of `key` (shared: do not modify it)."""
        return self._snapshots.get(key)

    def snapshots(self, prefix: str) -> list[watch_pb2.Snapshot]:
        """The current snapshots of the keys under `prefix` (shared)."""
        return [s for k, s in self._snapshots.items() if k.startswith(prefix)]

    def close(self) -> None:
        """End the term's streams: each notices at once and finishes."""
        self.closed = True
        self._bump()

    def remove(self, key: str) -> None:
        if self._snapshots.pop(key, None) is not None:
            self._responses.pop(key, None)
            self._bump(key)

    def _bump(self, key: str | None = None) -> None:
        self._generation += 1
        if key is not None:
            self._log.append((self._generation, key))
        for patterns, waiters in self._waiters.items():
            if key is None or not patterns or any(
                    key.startswith(p) if p.endswith("/") else key == p for p in patterns):
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(True)

    async def wait_change(self, seen: int, timeout: float) -> bool:
        """Wait until the generation passes `seen`; False after `timeout`."""
        beat = Heartbeat(timeout)
        beat.sent()
        try:
            return await self.next_change(seen, beat)
        finally:
            beat.stop()

    def changed_since(self, generation: int) -> list[str] | None:
        """The keys published or removed after `generation`, oldest first; None
        when the change log no longer reaches back that far."""
        if generation == self._generation:
            return []
        # After a change every stream asks the same question: answer it once.
        asked = (generation, self._generation)
        if self._last_answer[0] == asked:
            return self._last_answer[1]
        log = self._log
        if not log or log[0][0] > generation + 1:
            return None
        keys: dict[str, None] = {}
        for at, key in reversed(log):
            if at <= generation:
                break
            keys[key] = None
        answer = list(reversed(keys))
        self._last_answer = (asked, answer)
        return answer

    async def next_change(self, seen: int, beat: Heartbeat,
                          patterns: tuple[str, ...] = ()) -> bool:
        """Wait until the generation passes `seen`; False when `beat` is due first.
        With `patterns` (diff's), only a change of a key they match (or the
        end of the term) wakes it: a stream need not look at the others'.

        A bare future per wait: not wait_for (a Task per wait) nor
        asyncio.timeout around an Event (which asks for the running loop four
        times per wait, each a getpid() system call on Python 3.11: at 1,000
        streams per change, a twentieth of the controller's time)."""
        if self._generation != seen:
            return True
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        beat.waiter = waiter
        group = self._waiters.setdefault(patterns, set())
        group.add(waiter)
        try:
            return await waiter
        finally:
            group.discard(waiter)
            if not group and self._waiters.get(patterns) is group:
                del self._waiters[patterns]
            beat.waiter = None

    def diff(self, patterns: list[str], known: dict[str, str],
             since: int | None = None) -> list[watch_pb2.WatchResponse]:
        """Responses with the snapshots the client lacks for `patterns`; `known` is
        updated as if they were sent. With `since` (the generation `known` was
        last brought up to date at), only the keys changed after it are looked
        at: a change costs each stream the keys it changed, not every key under
        the stream's prefixes."""
        changed = None if since is None else self.changed_since(since)
        out = []
        for pattern in patterns:
            prefix = pattern.endswith("/")
            if changed is not None:
                keys = ([k for k in changed if k.startswith(pattern)] if prefix
                        else [pattern] if pattern in changed else [])
            elif prefix:
                keys = [k for k in self._snapshots if k.startswith(pattern)]
                keys += [k for k in known if k.startswith(pattern) and k != pattern
                         and k not in self._snapshots]
            else:
                keys = [pattern]
            for key in keys:
                snapshot = self._snapshots.get(key)
                if snapshot is not None:
                    if known.get(key) != snapshot.snapshot_id:
                        known[key] = snapshot.snapshot_id
                        out.append(self._responses[key])
                elif known.get(key):  # sent before, gone now
                    known[key] = ""
                    out.append(watch_pb2.WatchResponse(
                        snapshot=watch_pb2.Snapshot(key=key, deleted=True)))
        return out
