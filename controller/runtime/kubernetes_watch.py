"""The Pods of one servefleet cluster as the Kubernetes watch API tells them:
the Kubernetes runtime's `list` and `inspect` read this cache, so the
controller's liveness sweep (twice a second) costs the API server nothing.

- list once (label selector), then watch from the list's resourceVersion
  with bookmarks on; each event replaces or removes one Pod and moves the
  resourceVersion on, and so does a BOOKMARK (no object change);
- a watch that ends (the API server closes watches after a while) is opened
  again from the last resourceVersion, losing nothing;
- a resourceVersion too old for the API server (410 Gone: as the watch's
  HTTP status, or as an ERROR event with code 410) means events were lost:
  list again, and the listing replaces the cache (Pods deleted meanwhile
  disappear);
- any other failure: wait (RETRY_S, doubling to RETRY_MAX_S) and list again.

After a restart or a change of leader the first listing is the adoption:
`replicas()` gives every Pod of the cluster as a RuntimeReplica
(kubernetes_pods.replica_from_pod), and the controller's inventory matches
them with its registry as it does containers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable
from typing import Any, Protocol

from .base import RuntimeReplica
from .kubernetes_pods import replica_from_pod

logger = logging.getLogger(__name__)

RETRY_S = 0.5
RETRY_MAX_S = 10.0


class Gone(Exception):
    """The resourceVersion asked for is older than the API server keeps (410)."""


class PodApi(Protocol):
    async def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        """(Pods, the list's resourceVersion)."""
        ...

    def watch_pods(self, selector: str, resource_version: str
                   ) -> AsyncGenerator[dict[str, Any], None]:
        """Watch events ({"type", "object"}) after `resource_version`, bookmarks
        on; raises Gone when that version is too old."""
        ...


class PodCache:
    def __init__(self, api: PodApi, selector: str) -> None:
        self._api = api
        self._selector = selector
        self._pods: dict[str, dict[str, Any]] = {}
        self.resource_version = ""
        self.lists = 0  # how many times it listed (1 + relists)
        self._synced = asyncio.Event()
        self._changed = asyncio.Condition()

    def pods(self) -> dict[str, dict[str, Any]]:
        return dict(self._pods)

    def replicas(self) -> list[RuntimeReplica]:
        return [replica_from_pod(pod) for pod in self._pods.values()]

    async def synced(self) -> None:
        """Returns once the first listing is in."""
        await self._synced.wait()

    async def wait_for(self, predicate: Callable[[dict[str, dict[str, Any]]], bool],
                       timeout: float) -> None:
        """Until predicate(pods) holds (TimeoutError after `timeout`)."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: predicate(self._pods))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def _relist(self) -> None:
        items, version = await self._api.list_pods(self._selector)
        self._pods = {pod["metadata"]["name"]: pod for pod in items}
        self.resource_version = version
        self.lists += 1
        self._synced.set()
        await self._notify()

    async def _apply(self, event: dict[str, Any]) -> None:
        kind, pod = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if pod.get("code") == 410:
                raise Gone(pod.get("message", "resourceVersion too old"))
            raise RuntimeError(f"watch error: {pod.get('message', pod)}")
        version = (pod.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self._pods[pod["metadata"]["name"]] = pod
        elif kind == "DELETED":
            self._pods.pop(pod["metadata"]["name"], None)
        elif kind != "BOOKMARK":
            raise RuntimeError(f"unknown watch event type {kind!r}")
        if version:
            self.resource_version = version
        await self._notify()

    async def run(self) -> None:
        """List, then watch, forever (cancel to stop)."""
        delay = RETRY_S
        need_list = True
        while True:
            try:
                if need_list:
                    await self._relist()
                    need_list = False
                events = self._api.watch_pods(self._selector, self.resource_version)
                async with contextlib.aclosing(events):
                    async for event in events:
                        await self._apply(event)
                delay = RETRY_S  # the stream ended: watch again from where it was
            except Gone as e:
                logger.info("pod watch: %s; listing again", e)
                need_list = True
            except Exception as e:  # an API server down, a stream reset: list again
                logger.warning("pod watch failed (%s: %s); again in %.1f s",
                               type(e).__name__, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                need_list = True
