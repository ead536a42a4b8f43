"""The ServeApplications of one namespace, as the watch API tells them.

client-go's informer, with the controller's loop doing the retries:

- `sync` is the loop's work (reconcile/loop.py `spawn`): it lists when it
  must (the first time, and after anything went wrong), then watches from
  the list's resourceVersion with bookmarks, applying each event, until the
  API server ends the stream (it does after WATCH_TIMEOUT_S); the next pass
  spawns it again from the last resourceVersion, losing nothing;
- a resourceVersion too old (410 Gone, as the watch's status or an ERROR
  event) means events were lost: `sync` returns asking for a new listing,
  which replaces every object (those deleted meanwhile disappear);
- any other failure raises, so the loop backs off (BACKOFF) before the
  next `sync`, which lists again. What the API server says of itself
  (429 "storage is (re)initializing" while its watch cache fills after a
  start or a new CRD, 5xx, a connection refused or reset) raises
  Unavailable, which the loop logs as one warning line, not a traceback:
  it is the API server's state, not a bug, and it passes.

No decision is made from the cache before its first listing (`synced`): an
empty cache must not read as "every ServeApplication was deleted".
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator
from typing import Any, Protocol

from ..errors import Unavailable
from ..runtime.kubernetes_api import ApiError
from ..runtime.kubernetes_watch import Gone

logger = logging.getLogger(__name__)
# Statuses the API server answers about itself: try again later.
PASSING = frozenset({429, 500, 502, 503, 504})


class ObjectsApi(Protocol):
    """The calls the cache and the status writer need (client.py's)."""

    namespace: str

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        """(the objects, the list's resourceVersion)."""
        ...

    def watch(self, resource_version: str) -> AsyncGenerator[dict[str, Any], None]:
        """Events after `resource_version`; Gone when it is too old."""
        ...

    async def write_status(self, obj: dict[str, Any]) -> None:
        """PUT obj's status (409 when the object changed since it was read)."""
        ...


class ObjectCache:
    def __init__(self, api: ObjectsApi) -> None:
        self._api = api
        self.objects: dict[str, dict[str, Any]] = {}  # by metadata.name
        self.resource_version = ""
        self.synced = False  # the first listing is in
        self.lists = 0  # listings so far (1 + relists)
        self._need_list = True

    async def sync(self) -> None:
        """List if needed, then apply watch events until the stream ends."""
        try:
            if self._need_list:
                items, version = await self._api.list()
                self.objects = {o["metadata"]["name"]: o for o in items}
                self.resource_version, self.synced, self._need_list = version, True, False
                self.lists += 1
            events = self._api.watch(self.resource_version)
            async with contextlib.aclosing(events):
                async for event in events:
                    self._apply(event)
        except Gone as e:
            logger.info("ServeApplication watch: %s; listing again", e)
            self._need_list = True
        except ApiError as e:
            self._need_list = True
            if e.status == 404:
                raise ApiError(404, "the API server serves no serveapplications.servefleet.io "
                                    "in this namespace: install the CRD (servefleet config crd "
                                    "| kubectl apply -f -)") from None
            if e.status in PASSING:
                raise Unavailable(f"the API server answered {e}") from None
            raise
        except (ConnectionError, TimeoutError) as e:
            self._need_list = True
            raise Unavailable(f"the API server: {type(e).__name__}: {e}") from None
        except BaseException:
            self._need_list = True
            raise

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Gone(obj.get("message", "resourceVersion too old"))
            if obj.get("code") in PASSING:
                raise ApiError(obj["code"], obj.get("message", "watch error"))
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        if kind in ("ADDED", "MODIFIED"):
            self.objects[obj["metadata"]["name"]] = obj
        elif kind == "DELETED":
            self.objects.pop(obj["metadata"]["name"], None)
        elif kind != "BOOKMARK":
            raise RuntimeError(f"unknown watch event type {kind!r}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
