"""The ownership records of applications applied from ServeApplications
(ownership.py says why they are kept in servefleet's store):

    /servefleet/<cluster>/kube-applications/<app>  {"namespace", "name", "uid"} (JSON)

Only the leader writes them, fenced like every other write of its term; the
table mirrors them in memory once loaded. A record that cannot be read is
logged and set aside, never a reason to stop (as stored.py does for
applications): its application is then treated as deployed by other means.
"""

from __future__ import annotations

import json
import logging

from ..election import FencedStore
from ..keys import ClusterKeys
from ..store import Delete, Put, Store
from .ownership import Owner

logger = logging.getLogger(__name__)


class OwnerRecords:
    def __init__(self, keys: ClusterKeys, fenced: FencedStore, store: Store) -> None:
        self.prefix = keys.root + "kube-applications/"
        self._fenced = fenced
        self._store = store
        self.records: dict[str, Owner] = {}
        self.loaded = False

    async def load(self) -> None:
        records = {}
        for kv in await self._store.list_prefix(self.prefix):
            app = kv.key.removeprefix(self.prefix)
            try:
                value = json.loads(kv.value)
                records[app] = Owner(str(value["namespace"]), str(value["name"]),
                                     str(value["uid"]))
            except (ValueError, KeyError, TypeError) as e:
                logger.error("ServeApplication ownership record %s is unreadable (%s): set "
                             "aside", kv.key, e)
        self.records, self.loaded = records, True

    async def put(self, application: str, owner: Owner) -> None:
        value = json.dumps({"namespace": owner.namespace, "name": owner.name,
                            "uid": owner.uid}, sort_keys=True)
        await self._fenced.commit([Put(self.prefix + application, value.encode())])
        self.records[application] = owner

    async def delete(self, application: str) -> None:
        await self._fenced.commit([Delete(self.prefix + application)])
        self.records.pop(application, None)
