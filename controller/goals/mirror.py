"""The write discipline the leader's goal tables share (deployments, applications).

The store is the truth and a table mirrors it in memory: a write goes to the
store first (one fenced transaction) and reaches memory only once it
succeeded. The two steps are shielded from the caller's cancellation (a
client deadline), so a write that reaches the store also reaches memory. A
write whose outcome is unknown (the store became unreachable) marks the
table stale, and the next mutation reloads it from the store first. A
write refused for want of disk space is known not to have happened: the
table stays as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from ..election import FencedStore
from ..errors import StoreDiskFull, Unavailable
from ..store import Op, Store, StoreUnavailable


class StoreMirror:
    def __init__(self, fenced: FencedStore, store: Store,
                 load: Callable[[Store], Awaitable[None]]) -> None:
        self._fenced = fenced
        self._store = store
        self._load = load
        self.stale = False

    async def write(self, ops: Sequence[Op], mirror: Callable[[], None]) -> None:
        """Commit `ops` as the leader, then run `mirror` (memory, and what must follow)."""
        async def both() -> None:
            try:
                await self._fenced.commit(ops)
            except StoreDiskFull:
                raise  # nothing was written: memory still mirrors the store
            except Unavailable:
                self.stale = True
                raise
            mirror()

        await asyncio.shield(both())

    async def refresh_if_stale(self) -> bool:
        """Reload from the store if a write's outcome is unknown; True if it did."""
        if not self.stale:
            return False
        try:
            await self._load(self._store)
        except StoreUnavailable as e:
            raise Unavailable(f"the store is unavailable: {e}") from e
        self.stale = False
        return True
