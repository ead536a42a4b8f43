"""The Store interface: the controller's only path to hard state.

A store is a revisioned key-value map with leases, shaped after etcd's v3 API
so that the etcd and the embedded sqlite implementations can keep one
contract (tests/test_store_contract.py runs against both):

- Every successful write transaction advances the store's revision by one.
  A key carries the revision that created it (`create_revision`) and the one
  that last changed it (`mod_revision`).
- A key may be bound to a lease; when the lease expires or is revoked, its keys
  disappear. Leader election is built on this (controller/election.py).
- `txn` applies all its operations or none, and only when every guard holds.
  The controller guards each write with the create revision of its leader key
  (docs/design.md, "fenced transactions").

Store errors: `StoreUnavailable` when the backend cannot be reached or timed
out; the outcome of a write that raised it is unknown. `StoreFull`, a kind
of StoreUnavailable, when the store's disk has no room for a write: nothing
was written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class StoreUnavailable(Exception):
    """The store could not be reached, or did not answer in time."""


class StoreFull(StoreUnavailable):
    """No disk space for the write: it was refused, or rolled back, whole.

    A StoreUnavailable, so that every loop that waits out an unreachable
    store waits this out too; told apart because the outcome is known
    (nothing was written) and because retrying cannot help until someone
    frees space.
    """


class StoreOpenError(Exception):
    """The store cannot be used at all (a bad path, a file that is not a database)."""


class LeaseNotFound(Exception):
    """A Put named a lease that does not exist (expired or revoked); nothing was written."""


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int = 0


@dataclass(frozen=True)
class Put:
    key: str
    value: bytes
    lease: int = 0


@dataclass(frozen=True)
class Delete:
    """Delete `key`, or every key starting with it when `prefix` is true."""

    key: str
    prefix: bool = False


Op = Put | Delete


@dataclass(frozen=True)
class Guard:
    """Holds when `key`'s create revision equals `create_revision`.

    `create_revision=0` means "the key does not exist".
    """

    key: str
    create_revision: int


@dataclass(frozen=True)
class TxnResult:
    succeeded: bool
    # The store's revision after the transaction (unchanged when it failed).
    revision: int


def check_disjoint(ops: Sequence[Op]) -> None:
    """Raise ValueError when two operations touch the same key.

    etcd refuses such a transaction ("duplicate key given in txn request");
    every store refuses it the same way so the contract stays one.
    """
    seen: set[str] = set()
    prefixes: list[str] = []
    for op in ops:
        if isinstance(op, Delete) and op.prefix:
            prefixes.append(op.key)
        elif op.key in seen:
            raise ValueError(f"two operations on {op.key!r} in one transaction")
        else:
            seen.add(op.key)
    for prefix in prefixes:
        if any(key.startswith(prefix) for key in seen) or sum(
                other.startswith(prefix) or prefix.startswith(other) for other in prefixes) > 1:
            raise ValueError(f"operations overlap the deleted prefix {prefix!r}")


class Store(Protocol):
    async def open(self) -> None:
        """Check the store can be used at all; StoreOpenError if it never can.

        A store that is only unreachable now (etcd down) is not an error here.
        """
        ...

    async def get(self, key: str) -> KeyValue | None:
        """The key's current value, or None."""
        ...

    async def list_prefix(self, prefix: str) -> list[KeyValue]:
        """Every key starting with `prefix`, in key order."""
        ...

    async def revision(self) -> int:
        """The store's current revision."""
        ...

    async def txn(self, guards: Sequence[Guard], ops: Sequence[Op]) -> TxnResult:
        """Apply `ops` atomically if every guard holds; otherwise change nothing.

        Raises ValueError when two operations touch the same key,
        LeaseNotFound when a Put names a lease that does not exist, and
        StoreFull when the store has no disk space for it (nothing written).
        """
        ...

    async def grant_lease(self, ttl: float) -> int:
        """A new lease that expires `ttl` seconds from now unless kept alive."""
        ...

    async def keepalive(self, lease: int) -> float:
        """Renew the lease; returns its new TTL, or 0 if it has already expired."""
        ...

    async def revoke_lease(self, lease: int) -> None:
        """End the lease now, deleting its keys. Unknown leases are ignored."""
        ...

    async def wait_for_change(self, key: str, after_revision: int, timeout: float) -> None:
        """Wait until `key`, seen at mod revision `after_revision`, changes.

        Returns once the key has been modified or deleted at a later revision,
        or after `timeout` seconds, whichever comes first.
        """
        ...

    async def close(self) -> None:
        ...
