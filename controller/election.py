"""Leader election over the store, and the fence every leader write passes.

The scheme is etcd's `concurrency.Election`:

1. Campaign: while the leader key exists, watch it. When it is absent, grant
   a lease of `ttl` seconds and create the key bound to it in a transaction
   guarded by "the key does not exist". Winning makes the key's create
   revision this term's fencing token.
2. Hold: renew the lease every ttl/3. Leadership is lost when etcd says the
   lease is gone, when no renewal succeeded for a whole TTL (the lease may
   have expired while we could not tell: for instance the process was
   stopped), or when a fenced write is refused.
3. Resign: revoke the lease, which deletes the key, so a watching standby
   takes over at once instead of waiting for the TTL.

`FencedStore` wraps the store for the leader: each write is one transaction
guarded by `create_revision(leader key) == fencing token`. A refused write
means another controller leads: the election is marked lost at once and the
caller gets NotLeader; nothing was written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Sequence

from .clock import Clock
from .errors import NotLeader, StoreDiskFull, Unavailable
from .metrics import FENCED_REFUSED, STORE_FAILURES, STORE_TXN
from .store import Guard, LeaseNotFound, Op, Put, Store, StoreFull, StoreUnavailable

logger = logging.getLogger(__name__)


class LeaderElection:
    """Campaigns for `key` with `identity` (the advertised address) as its value."""

    def __init__(self, store: Store, key: str, identity: str, ttl: float,
                 clock: Clock | None = None) -> None:
        if ttl <= 0:
            raise ValueError("the lease TTL must be positive")
        self._store = store
        self._key = key
        self.identity = identity
        self.ttl = ttl
        self._clock = clock or Clock()
        self._lease = 0
        self._renewed_at = 0.0
        self._lost = asyncio.Event()
        self._lost_reason = ""
        # The fencing token while leading, else None.
        self.revision: int | None = None
        # The last leader seen (ourselves included), for NotLeader hints.
        self.leader: str | None = None

    @property
    def is_leader(self) -> bool:
        return self.revision is not None

    def _saw_leader(self, leader: str | None) -> None:
        if leader != self.leader:
            logger.info("leader is now %s", leader or "(none)")
            self.leader = leader

    async def lookup_leader(self) -> str | None:
        """Read the leader key now (for hints when the last known leader is stale)."""
        try:
            current = await asyncio.wait_for(self._store.get(self._key), 1.0)
        except (StoreUnavailable, TimeoutError):
            return self.leader
        self._saw_leader(current.value.decode() if current is not None else None)
        return self.leader

    # -- 1. campaign --------------------------------------------------------

    async def campaign(self) -> int:
        """Wait until this controller leads; returns the fencing token."""
        failures = 0
        while True:
            try:
                token = await self._try_acquire()
            except StoreUnavailable as e:
                failures += 1
                delay = min(self.ttl, 0.1 * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                if failures == 1:
                    logger.warning("store unavailable while campaigning: %s", e)
                await self._clock.sleep(delay)
                continue
            failures = 0
            if token is not None:
                return token

    async def _try_acquire(self) -> int | None:
        current = await self._store.get(self._key)
        if current is not None:
            self._saw_leader(current.value.decode())
            await self._store.wait_for_change(self._key, current.mod_revision, self.ttl / 3)
            return None
        sent = self._clock.monotonic()
        lease = await self._store.grant_lease(self.ttl)
        try:
            result = await self._store.txn(
                [Guard(self._key, 0)], [Put(self._key, self.identity.encode(), lease=lease)])
        except LeaseNotFound:
            return None  # the new lease ran out already (a long pause): campaign again
        if not result.succeeded:
            with contextlib.suppress(StoreUnavailable):
                await self._store.revoke_lease(lease)
            return None
        self._lease, self._renewed_at = lease, sent
        self._lost.clear()
        self.revision = result.revision
        self._saw_leader(self.identity)
        logger.info("elected leader with fencing revision %d (lease TTL %gs)",
                    result.revision, self.ttl)
        return result.revision

    # -- 2. hold --------------------------------------------------------------

    async def hold(self) -> str:
        """Keep the lease alive while leading; returns why leadership ended.

        Whatever ends it (loss, cancellation, a bug), the controller steps down.
        """
        reason = "leadership ended unexpectedly"
        try:
            reason = await self._renew_until_lost()
        except asyncio.CancelledError:
            reason = self._lost_reason or "cancelled"
            raise
        except Exception as e:
            reason = f"lease renewal failed: {type(e).__name__}: {e}"
            logger.exception("lease renewal failed")
        finally:
            await self._step_down(reason)
        return reason

    def lease_valid(self) -> bool:
        """Leading, and the lease cannot have expired yet by this process's clock.

        A leader that was paused past its TTL stops serving even before its
        renewal loop runs again.
        """
        return (self.revision is not None
                and self._clock.monotonic() < self._renewed_at + self.ttl)

    async def _renew_until_lost(self) -> str:
        interval = self.ttl / 3
        while True:
            deadline = self._renewed_at + self.ttl
            wait = min(interval, deadline - self._clock.monotonic())
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._lost.wait(), wait)
            if self._lost.is_set():
                return self._lost_reason
            if self._clock.monotonic() >= deadline:
                return "the lease could not be renewed within its TTL"
            sent = self._clock.monotonic()
            try:
                remaining = await asyncio.wait_for(self._store.keepalive(self._lease),
                                                   max(0.05, deadline - sent))
            except (StoreUnavailable, TimeoutError) as e:
                logger.warning("lease renewal failed, retrying: %s", e or "timed out")
                continue
            if remaining <= 0:
                return "the lease expired"
            self._renewed_at = sent

    def mark_lost(self, reason: str) -> None:
        """Leadership is gone (e.g. a fenced write was refused): stop acting now."""
        if self.revision is not None and not self._lost.is_set():
            self._lost_reason = reason
            # Clearing the token first makes every later fenced write refuse locally.
            self.revision = None
            self._lost.set()

    async def _step_down(self, reason: str) -> None:
        self.revision = None
        self._saw_leader(None)
        logger.log(logging.INFO if reason == "resigned" else logging.WARNING,
                   "lost leadership: %s", reason)
        lease, self._lease = self._lease, 0
        if lease:
            with contextlib.suppress(StoreUnavailable):
                await self._store.revoke_lease(lease)

    # -- 3. resign -------------------------------------------------------------

    async def resign(self) -> None:
        """Give up leadership now, deleting the leader key. Idempotent."""
        if self.revision is None:
            return
        self.mark_lost("resigned")
        lease, self._lease = self._lease, 0
        if lease:
            try:
                await self._store.revoke_lease(lease)
            except StoreUnavailable as e:
                logger.warning("could not revoke the lease on resign (it will expire): %s", e)


class FencedStore:
    """The leader's write path for one term: every transaction carries its token.

    `token` is the fencing revision of the term this FencedStore was made for;
    a write still under way from an earlier term is refused even if this
    process leads again later.

    With a `journal_key`, every transaction also puts "<token> <identity>"
    there: the store's history of that key says, for every revision a
    leader wrote, which term and which controller wrote it (the chaos
    suite checks that terms never go back along the revisions).
    """

    def __init__(self, store: Store, election: LeaderElection, leader_key: str,
                 token: int, journal_key: str = "") -> None:
        self._store = store
        self._election = election
        self._leader_key = leader_key
        self._token = token
        self._journal = [Put(journal_key, f"{token} {election.identity}".encode())] \
            if journal_key else []

    def still_valid(self) -> bool:
        """This term is current and its lease cannot have lapsed yet."""
        return self._election.revision == self._token and self._election.lease_valid()

    async def commit(self, ops: Sequence[Op]) -> int:
        """Write `ops` atomically as the leader; returns the new store revision.

        Raises NotLeader (nothing written) when this controller does not lead,
        or when the guard shows another controller has taken over;
        StoreDiskFull (nothing written) when the store has no disk space for
        it; Unavailable when the store cannot be reached (the write may or
        may not have happened).
        """
        token = self._token
        if self._election.revision != token:
            raise NotLeader(self._election.leader)
        began = time.perf_counter()
        try:
            result = await self._store.txn([Guard(self._leader_key, token)],
                                           [*ops, *self._journal])
        except StoreFull as e:
            STORE_FAILURES.inc()
            raise StoreDiskFull(str(e)) from e
        except StoreUnavailable as e:
            STORE_FAILURES.inc()
            raise Unavailable(f"the store is unavailable: {e}") from e
        STORE_TXN.observe(time.perf_counter() - began)
        if not result.succeeded:
            FENCED_REFUSED.inc()
            self._election.mark_lost(
                f"a write fenced by revision {token} was refused: another controller leads")
            raise NotLeader(None)
        return result.revision
