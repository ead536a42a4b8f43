"""The embedded store: the Store contract on one sqlite file.

For a single machine (`servefleet up`, the embedded default). It keeps etcd's
model so that the controller cannot tell the two apart: one global revision
advanced by each write transaction, create/mod revisions per key, and leases
whose keys vanish when they expire. Expired leases are reaped at the start of
every operation, inside the same sqlite transaction, so no reader ever sees a
key whose lease has run out.

Durability: WAL journal with synchronous=FULL, so a transaction that returned
is on disk and survives a crash of the process or the machine. On a full
disk, writes that add data are refused with StoreFull while lease renewals
and deletes go on, so the leader keeps its lease (sqlite_space.py). Several
processes may share the file (sqlite's locking serialises them), which is what
lets two controllers on one host elect a leader over it.

All sqlite work runs on one worker thread that owns the connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from .base import (
    Delete,
    Guard,
    KeyValue,
    LeaseNotFound,
    Op,
    Put,
    StoreFull,
    StoreOpenError,
    StoreUnavailable,
    TxnResult,
    check_disjoint,
)
from .sqlite_space import (
    HEADROOM_BYTES,
    bytes_needed,
    check_room,
    free_bytes,
    full_message,
    is_full,
)

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (id INTEGER PRIMARY KEY CHECK (id = 0), revision INTEGER NOT NULL);
INSERT OR IGNORE INTO meta (id, revision) VALUES (0, 1);
CREATE TABLE IF NOT EXISTS kv (
  key TEXT PRIMARY KEY,
  value BLOB NOT NULL,
  create_revision INTEGER NOT NULL,
  mod_revision INTEGER NOT NULL,
  lease INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS kv_lease ON kv (lease) WHERE lease != 0;
CREATE TABLE IF NOT EXISTS leases (
  id INTEGER PRIMARY KEY, ttl REAL NOT NULL, expires_at REAL NOT NULL
);
"""

# Polling period of wait_for_change: sqlite has no change notification across
# processes. 50 ms keeps a resigned leader's successor quick at negligible cost.
_POLL_S = 0.05


def _prefix_end(prefix: str) -> str:
    """The least string greater than every string starting with `prefix`."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"


class SqliteStore:
    """A Store in the sqlite database at `path` (created if missing)."""

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        # Lease expiry is wall-clock time, because several processes share it.
        self._clock = clock
        self._path = str(path)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sqlite")
        self._conn: sqlite3.Connection | None = None

    # -- plumbing ---------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                if self._path != ":memory:":
                    Path(self._path).parent.mkdir(parents=True, exist_ok=True)
                    # The store holds every spec, env values included: this
                    # user's alone (sqlite gives its -wal and -shm the same mode).
                    os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o600))
                    for path in (self._path, self._path + "-wal", self._path + "-shm"):
                        with contextlib.suppress(OSError):  # one made before, or not ours
                            os.chmod(path, 0o600)
                conn = sqlite3.connect(self._path, timeout=10.0, isolation_level=None,
                                       check_same_thread=False)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                # Checkpoint after every write, so that lease renewals need no
                # new disk space on a full disk (sqlite_space.py, rule 1). It
                # costs a write about 0.3 ms (0.37 -> 0.66 ms on an SSD).
                conn.execute("PRAGMA wal_autocheckpoint=1")
                conn.executescript(_SCHEMA)
            except (OSError, sqlite3.DatabaseError) as e:
                # Opening needs a little space (the -wal and the 32 KiB -shm);
                # on a full disk sqlite says only "disk I/O error".
                free = free_bytes(self._path)
                full = (f" (its disk is full: {free} bytes free in "
                        f"{os.path.dirname(self._path)})"
                        if free is not None and free < HEADROOM_BYTES else "")
                raise StoreOpenError(
                    f"cannot use {self._path} as a sqlite store: {e}{full}") from e
            self._conn = conn
        return self._conn

    async def open(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._open)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def work() -> T:
            conn = self._open()
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._reap_expired(conn)
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                # After SQLITE_FULL sqlite may have rolled back by itself already.
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, work)
        except sqlite3.OperationalError as e:  # locked by another process, disk full
            if is_full(e):
                raise StoreFull(full_message(self._path, str(e))) from e
            raise StoreUnavailable(f"sqlite store {self._path}: {e}") from e

    @staticmethod
    def _current_revision(conn: sqlite3.Connection) -> int:
        return int(conn.execute("SELECT revision FROM meta WHERE id = 0").fetchone()[0])

    @staticmethod
    def _advance_revision(conn: sqlite3.Connection) -> int:
        conn.execute("UPDATE meta SET revision = revision + 1 WHERE id = 0")
        return SqliteStore._current_revision(conn)

    def _reap_expired(self, conn: sqlite3.Connection) -> None:
        now = self._clock()
        expired = [row[0] for row in
                   conn.execute("SELECT id FROM leases WHERE expires_at <= ?", (now,))]
        if expired:
            self._drop_leases(conn, expired)

    def _drop_leases(self, conn: sqlite3.Connection, lease_ids: Sequence[int]) -> None:
        marks = ",".join("?" * len(lease_ids))
        conn.execute(f"DELETE FROM leases WHERE id IN ({marks})", lease_ids)
        deleted = conn.execute(f"DELETE FROM kv WHERE lease IN ({marks})", lease_ids).rowcount
        if deleted:
            self._advance_revision(conn)

    @staticmethod
    def _row(row: tuple) -> KeyValue:
        return KeyValue(key=row[0], value=bytes(row[1]), create_revision=row[2],
                        mod_revision=row[3], lease=row[4])

    async def close(self) -> None:
        def work() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, work)
        self._executor.shutdown(wait=False)

    # -- reads ------------------------------------------------------------

    async def get(self, key: str) -> KeyValue | None:
        def fn(conn: sqlite3.Connection) -> KeyValue | None:
            row = conn.execute(
                "SELECT key, value, create_revision, mod_revision, lease FROM kv WHERE key = ?",
                (key,)).fetchone()
            return self._row(row) if row else None

        return await self._run(fn)

    async def list_prefix(self, prefix: str) -> list[KeyValue]:
        def fn(conn: sqlite3.Connection) -> list[KeyValue]:
            rows = conn.execute(
                "SELECT key, value, create_revision, mod_revision, lease FROM kv "
                "WHERE key >= ? AND key < ? ORDER BY key", (prefix, _prefix_end(prefix)))
            return [self._row(r) for r in rows]

        return await self._run(fn)

    async def revision(self) -> int:
        return await self._run(self._current_revision)

    # -- writes -----------------------------------------------------------

    async def txn(self, guards: Sequence[Guard], ops: Sequence[Op]) -> TxnResult:
        check_disjoint(ops)
        needed = bytes_needed(ops)

        def fn(conn: sqlite3.Connection) -> TxnResult:
            for guard in guards:
                row = conn.execute("SELECT create_revision FROM kv WHERE key = ?",
                                   (guard.key,)).fetchone()
                if (row[0] if row else 0) != guard.create_revision:
                    return TxnResult(False, self._current_revision(conn))
            check_room(self._path, needed)  # StoreFull before anything is written
            # Like etcd, a transaction that changes nothing keeps the revision.
            revision = self._current_revision(conn) + 1
            before = conn.total_changes
            for op in ops:
                self._apply(conn, op, revision)
            if conn.total_changes == before:
                return TxnResult(True, revision - 1)
            return TxnResult(True, self._advance_revision(conn))

        return await self._run(fn)

    @staticmethod
    def _apply(conn: sqlite3.Connection, op: Op, revision: int) -> None:
        if isinstance(op, Put):
            if op.lease and not conn.execute("SELECT 1 FROM leases WHERE id = ?",
                                             (op.lease,)).fetchone():
                raise LeaseNotFound(f"lease {op.lease} not found")
            conn.execute(
                "INSERT INTO kv (key, value, create_revision, mod_revision, lease) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                "value = excluded.value, mod_revision = excluded.mod_revision, "
                "lease = excluded.lease",
                (op.key, op.value, revision, revision, op.lease))
        elif isinstance(op, Delete) and op.prefix:
            conn.execute("DELETE FROM kv WHERE substr(key, 1, ?) = ?", (len(op.key), op.key))
        else:
            conn.execute("DELETE FROM kv WHERE key = ?", (op.key,))

    # -- leases -----------------------------------------------------------

    async def grant_lease(self, ttl: float) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            check_room(self._path, HEADROOM_BYTES)
            lease = secrets.randbits(62) or 1
            conn.execute("INSERT INTO leases (id, ttl, expires_at) VALUES (?, ?, ?)",
                         (lease, ttl, self._clock() + ttl))
            return lease

        return await self._run(fn)

    async def keepalive(self, lease: int) -> float:
        def fn(conn: sqlite3.Connection) -> float:
            row = conn.execute("SELECT ttl FROM leases WHERE id = ?", (lease,)).fetchone()
            if row is None:
                return 0.0
            conn.execute("UPDATE leases SET expires_at = ? WHERE id = ?",
                         (self._clock() + row[0], lease))
            return float(row[0])

        return await self._run(fn)

    async def revoke_lease(self, lease: int) -> None:
        await self._run(lambda conn: self._drop_leases(conn, [lease]))

    # -- watch ------------------------------------------------------------

    async def wait_for_change(self, key: str, after_revision: int, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            current = await self.get(key)
            if current is None or current.mod_revision > after_revision:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.sleep(min(_POLL_S, max(0.0, deadline - loop.time())))
