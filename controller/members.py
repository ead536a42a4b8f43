"""Which controllers of a cluster are alive, and where they listen.

Every controller, leader or standby, keeps one key under
`/servefleet/<cluster>/controllers/` bound to a lease of its own, the way an
etcd `concurrency.Election` candidate keeps its key under the election
prefix. The value is the controller's advertised address. The key is not
hard state: it vanishes with the lease when the controller dies, so it is the
one write besides the campaign itself that is not fenced by the leader's
token.

The leader hands the list to the replicas it starts, so a replica's Watch
stream can reach whichever controller leads later (a standby answers with
the leader's address), and GetStatus shows it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from .clock import Clock
from .store import LeaseNotFound, Put, Store, StoreUnavailable

logger = logging.getLogger(__name__)


class Membership:
    def __init__(self, store: Store, prefix: str, address: str, ttl: float,
                 clock: Clock | None = None) -> None:
        self._store = store
        self._key = prefix + uuid.uuid4().hex[:12]
        self._prefix = prefix
        self.address = address
        self._ttl = ttl
        self._clock = clock or Clock()
        self._lease = 0
        # Advertised addresses of the live controllers, as last read; this one first.
        self.addresses: list[str] = [address]

    async def run(self) -> None:
        """Keep this controller's key alive and the list fresh, until cancelled."""
        warned = False
        while True:
            try:
                if not self._lease or await self._store.keepalive(self._lease) <= 0:
                    await self._register()
                await self.refresh()
                warned = False
            except StoreUnavailable as e:
                if not warned:
                    logger.warning("cannot renew controller membership: %s", e)
                    warned = True
            await self._clock.sleep(self._ttl / 3)

    async def _register(self) -> None:
        lease = await self._store.grant_lease(self._ttl)
        try:
            await self._store.txn([], [Put(self._key, self.address.encode(), lease=lease)])
        except LeaseNotFound:
            return  # expired between grant and put: a long pause; next round
        # Kept only once the key is written: after a failed put (a full disk,
        # the store down) the next round registers again, where renewing the
        # lease would keep alive no key at all.
        self._lease = lease

    async def refresh(self) -> list[str]:
        """Read the member list now."""
        found = {kv.value.decode() for kv in await self._store.list_prefix(self._prefix)}
        found.discard(self.address)
        self.addresses = [self.address, *sorted(found)]
        return self.addresses

    async def leave(self) -> None:
        """Delete this controller's key now (on shutdown). Idempotent."""
        lease, self._lease = self._lease, 0
        if lease:
            try:
                await asyncio.wait_for(self._store.revoke_lease(lease), 2.0)
            except (StoreUnavailable, TimeoutError) as e:
                logger.warning("could not leave the member list (the key will expire): %s", e)
