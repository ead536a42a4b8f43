"""The embedded store on a full disk: which writes still go through, and the
error for the rest.

sqlite needs room for a write twice: the pages go to the WAL first, and a
checkpoint later copies them into the database file. A write that fits in
the WAL but makes the database file grow commits, and then its checkpoint
fails for want of space: the WAL can no longer start over from its
beginning, so every later write needs new space too, the leader's lease
renewals among them. One deploy onto a nearly full disk would cost the
leader its lease, and stop the reconcile loop, until space is freed.

So the store (sqlite.py) keeps two rules:

1. It checkpoints after every write (`wal_autocheckpoint=1`). The database
   file always holds every page, and the next write starts the WAL over in
   space the file already has. A write that only changes rows in place (a
   lease renewal, the reaping of expired leases, a delete) needs no new
   disk space and goes on working on a full disk.
2. A write that adds data (a Put, a new lease) is refused before anything
   is written while the filesystem has less free space than it may need:
   twice its bytes (WAL and database file) plus HEADROOM_BYTES. It raises
   StoreFull, naming the store's file and the space left. Deletes and
   lease renewals are never refused for space, like etcd's NOSPACE alarm,
   which still takes deletes and keep-alives.

A write that runs out of space all the same (the disk filled up during it)
fails with SQLITE_FULL, which sqlite rolls back whole: StoreFull as well,
and nothing was written.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence

from .base import Op, Put, StoreFull

# Room kept free beyond a write's own bytes: b-tree pages split by an
# insert, the -shm index growing by 32 KiB, and the WAL's frame headers.
HEADROOM_BYTES = 1 << 20


def free_bytes(db_path: str) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem holding
    `db_path` (root's reserved blocks not counted); None when unknown (an
    in-memory database, a directory that is gone)."""
    if db_path == ":memory:":
        return None
    try:
        stat = os.statvfs(os.path.dirname(db_path) or ".")
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


def bytes_needed(ops: Sequence[Op]) -> int:
    """The free space a transaction of `ops` asks for; 0 when it only deletes."""
    added = sum(len(op.key.encode()) + len(op.value) for op in ops if isinstance(op, Put))
    return 2 * added + HEADROOM_BYTES if any(isinstance(op, Put) for op in ops) else 0


def check_room(db_path: str, needed: int) -> None:
    """Raise StoreFull when fewer than `needed` bytes are free for `db_path`."""
    if needed <= 0:
        return
    free = free_bytes(db_path)
    if free is not None and free < needed:
        raise StoreFull(full_message(db_path, f"{_size(free)} free, a write needs {_size(needed)}"))


def is_full(error: sqlite3.Error) -> bool:
    """True for sqlite's SQLITE_FULL ("database or disk is full")."""
    return getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL


def full_message(db_path: str, detail: str) -> str:
    return (f"the store's disk is full: no room for the sqlite store {db_path} ({detail}); "
            f"writes are refused until space is freed in {os.path.dirname(db_path)}")


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"
