"""The one Watch client shared by proxies, replicas and SDK handles.

It keeps a stream open to the leader for a set of keys and holds the latest
snapshot of each. On any failure it reconnects with jittered exponential
backoff, going straight to the leader a standby names, and resumes by
sending the snapshot ids it holds, so only what changed in between is sent
again. While no controller can be reached the last snapshots stay in force:
callers keep serving with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from collections.abc import Callable, Sequence

import grpc
from prometheus_client import Counter

from servefleet._private.security.tls import Credentials
from servefleet._private.wire import LEADER_METADATA_KEY, resolve_addresses
from servefleet.v1 import controller_pb2_grpc, watch_pb2

logger = logging.getLogger(__name__)
RECONNECTS = Counter("servefleet_watch_reconnects", "Watch streams opened again after one "
                     "ended or went silent", ["kind"])

# How long close() waits for the stream's task to end.
CLOSE_TIMEOUT_S = 2.0
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.keepalive_time_ms", 10_000),
]


def _retrieved(task: asyncio.Task[None]) -> None:
    """A task left running at close: its end is read, so nothing is logged as lost."""
    if not task.cancelled():
        task.exception()


class WatchClient:
    def __init__(self, addresses: str | Sequence[str] | None, keys: Sequence[str], *,
                 on_snapshot: Callable[[watch_pb2.Snapshot], None] | None = None,
                 kind: watch_pb2.WatcherKind = watch_pb2.WATCHER_KIND_UNSPECIFIED,
                 address: str = "",
                 watcher_id: str | None = None, heartbeat_s: float = 5.0,
                 credentials: Credentials | None = None) -> None:
        self.addresses = resolve_addresses(addresses)
        # Default: from the environment (SERVEFLEET_CERTS, SERVEFLEET_TOKEN, ...).
        self.credentials = credentials if credentials is not None else Credentials.from_env(
            addresses=self.addresses)
        self.keys = list(keys)
        self.snapshots: dict[str, watch_pb2.Snapshot] = {}
        self.watcher_id = watcher_id or uuid.uuid4().hex[:12]
        self.connected = asyncio.Event()
        self.reconnects = 0
        self._on_snapshot = on_snapshot or (lambda snapshot: None)
        self._kind = kind
        self._address = address
        self._heartbeat_s = heartbeat_s
        self._current = 0
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def leader_address(self) -> str:
        """The controller the stream is (or was last) connected to."""
        return self.addresses[self._current]

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="watch-client")

    async def close(self) -> None:
        """Stop watching. Bounded: a cancel can be lost (asyncio.wait_for
        returns the stream's own error when the stream fails at the moment of
        the cancel, gRPC may answer a cancel with a CANCELLED error), so the
        loop also stops at its next turn, and this waits CLOSE_TIMEOUT_S at
        most: a replica told to stop while its controller stopped too once
        stayed up, reconnecting forever."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=CLOSE_TIMEOUT_S)
            if done:
                with contextlib.suppress(asyncio.CancelledError):
                    self._task.result()
            else:
                logger.warning("the watch stream did not stop within %s s", CLOSE_TIMEOUT_S)
                self._task.add_done_callback(_retrieved)
            self._task = None

    def _request(self) -> watch_pb2.WatchRequest:
        known = {key: "" for key in self.keys}
        known.update({key: s.snapshot_id for key, s in self.snapshots.items()})
        return watch_pb2.WatchRequest(watcher_id=self.watcher_id, kind=self._kind,
                                      address=self._address, known=known,
                                      heartbeat_s=self._heartbeat_s)

    async def _run(self) -> None:
        failures = 0
        while not self._closing:
            address = self.addresses[self._current]
            hint = None
            try:
                async with self.credentials.aio_channel(address, CHANNEL_OPTIONS) as ch:
                    stub = controller_pb2_grpc.ControllerServiceStub(ch)
                    responses = stub.Watch(self._request(),
                                           metadata=self.credentials.metadata).__aiter__()
                    while True:
                        # A live stream says something every heartbeat; silence for
                        # three means a stopped or cut-off leader: reconnect.
                        response = await asyncio.wait_for(responses.__anext__(),
                                                          3 * self._heartbeat_s)
                        if not self.connected.is_set():
                            self.connected.set()
                            failures = 0
                        if self._closing:  # the cancel came with a response: lost
                            return
                        if response.HasField("snapshot"):
                            self._apply(response.snapshot)
            except grpc.aio.AioRpcError as e:
                for key, value in e.trailing_metadata() or ():
                    if key == LEADER_METADATA_KEY and value:
                        hint = str(value)
                refused = e.code() in (grpc.StatusCode.UNAUTHENTICATED,
                                       grpc.StatusCode.PERMISSION_DENIED)
                logger.log(logging.WARNING if refused else logging.DEBUG,
                           "watch stream to %s ended: %s", address, e.details())
            except (TimeoutError, StopAsyncIteration):
                logger.info("watch stream to %s went quiet; reconnecting", address)
            except asyncio.CancelledError:
                self.connected.clear()
                raise
            except Exception:
                logger.exception("watch stream to %s failed; reconnecting", address)
            self.connected.clear()
            if self._closing:  # closed while the stream failed: the cancel was lost
                return
            self.reconnects += 1
            RECONNECTS.labels(watch_pb2.WatcherKind.Name(self._kind)
                              .removeprefix("WATCHER_KIND_").lower()).inc()
            if hint and hint != address:
                if hint not in self.addresses:
                    self.addresses.append(hint)
                self._current = self.addresses.index(hint)
                if failures < 2:
                    failures += 1
                    continue
            else:
                self._current = (self._current + 1) % len(self.addresses)
            failures += 1
            await asyncio.sleep(min(2.0, 0.05 * 2 ** min(failures, 6)) * random.uniform(0.5, 1))

    def _apply(self, snapshot: watch_pb2.Snapshot) -> None:
        if snapshot.deleted:
            self.snapshots.pop(snapshot.key, None)
        else:
            self.snapshots[snapshot.key] = snapshot
        try:
            self._on_snapshot(snapshot)
        except Exception:  # the caller's bug must not end the stream
            logger.exception("on_snapshot failed for %s", snapshot.key)
