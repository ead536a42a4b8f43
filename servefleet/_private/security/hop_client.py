"""This process's hop pass: what its requests to replicas carry (security/hop.py).

One per process, `HOP_PASS`, read by every way this process reaches a
replica: the HTTP hop (dataplane/upstream.py), WebSockets (proxy/websocket.py),
gRPC calls (dataplane/grpc_forward.py). Proxies and drivers' handles start
`renew` with their Watch client (it knows the leader and the credentials);
a replica starts with the pass its settings carry and renews it the same way.

`renew` asks the leader (GetHopPass) at once and again once half of a pass's
life has passed; FAILED_PRECONDITION means the cluster has no credentials
and its replicas check nothing: no pass, asked again every NOT_NEEDED_S.
Until the first answer, `wait_ready` holds requests (at most READY_WAIT_S),
so a proxy's first requests do not race its pass; a process that never
started `renew` holds nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc

from servefleet._private.security.hop import HOP_HEADER, PASS_TTL_S
from servefleet.v1 import controller_pb2, controller_pb2_grpc

if TYPE_CHECKING:
    from servefleet._private.watch_client import WatchClient

logger = logging.getLogger(__name__)
NOT_NEEDED_S = 300.0
READY_WAIT_S = 10.0
RETRY_S = (1.0, 30.0)


class HopPassHolder:
    def __init__(self) -> None:
        self.value = ""
        # The header line the HTTP hop writes, and gRPC's metadata.
        self.line = b""
        self.metadata: tuple[tuple[str, str], ...] = ()
        self.expires = 0.0
        self.ready = True
        self._answered: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        # Told when the pass changes (an HAProxy engine writes it in its config).
        self.listeners: list[Callable[[], None]] = []
        # The controllers the pass is from.
        self._cluster: tuple[str, ...] = ()

    def set(self, value: str, expires: float) -> None:
        changed = value != self.value
        self.value, self.expires = value, expires
        for listener in self.listeners if changed else ():
            listener()
        self.line = f"{HOP_HEADER}: {value}\r\n".encode() if value else b""
        self.metadata = ((HOP_HEADER, value),) if value else ()
        self.ready = True
        if self._answered is not None:
            self._answered.set()

    async def wait_ready(self) -> None:
        """Hold a request until this process knows its pass (or that it needs none)."""
        if self.ready or self._answered is None:
            return
        try:
            await asyncio.wait_for(self._answered.wait(), READY_WAIT_S)
        except TimeoutError:
            logger.warning("no hop pass after %.0f s: requests go without one", READY_WAIT_S)
            self.ready = True

    def renew(self, watcher: WatchClient) -> None:
        """Keep a pass for this process's credentials, from `watcher`'s leader
        (call from the loop that will use it). Again for the same controllers:
        nothing new; for others (a script's second local run, another
        cluster): the pass of the first is of no use there, a new one is asked."""
        cluster = tuple(watcher.addresses)
        if self._task is not None and not self._task.done():
            if cluster == self._cluster:
                return
            self._task.cancel()
            self.set("", 0.0)
        self._cluster = cluster
        if not self.value:
            self.ready = False
            self._answered = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._renew(watcher),
                                                            name="hop-pass")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _renew(self, watcher: WatchClient) -> None:
        failures = 0
        while True:
            left = self.expires - time.time()
            if self.value and left > PASS_TTL_S / 2:
                await asyncio.sleep(left - PASS_TTL_S / 2)
            try:
                await self._ask(watcher)
                failures = 0
            except grpc.aio.AioRpcError as e:
                if e.code() == grpc.StatusCode.FAILED_PRECONDITION:
                    self.set("", 0.0)  # no credentials: nothing to show
                    await asyncio.sleep(NOT_NEEDED_S)
                    continue
                failures += 1
                refused = e.code() in (grpc.StatusCode.UNAUTHENTICATED,
                                       grpc.StatusCode.PERMISSION_DENIED)
                if refused and not self.ready:
                    # A role without passes (a reader's script): its calls go
                    # without one, and replicas of a cluster with credentials
                    # refuse them, saying why; no reason to hold them.
                    self.ready = True
                    if self._answered is not None:
                        self._answered.set()
                if refused or failures == 3:
                    logger.warning("cannot get a hop pass from %s: %s",
                                   watcher.leader_address(), e.details())
                await asyncio.sleep(min(RETRY_S[1], RETRY_S[0] * 2 ** (failures - 1)))

    async def _ask(self, watcher: WatchClient) -> None:
        async with watcher.credentials.aio_channel(watcher.leader_address()) as channel:
            answer = await controller_pb2_grpc.ControllerServiceStub(channel).GetHopPass(
                controller_pb2.GetHopPassRequest(), metadata=watcher.credentials.metadata,
                timeout=10)
        self.set(getattr(answer, "pass"), answer.expires.ToNanoseconds() / 1e9)
        logger.info("hop pass for %s, until %s", answer.subject,
                    time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(self.expires)))


HOP_PASS = HopPassHolder()
