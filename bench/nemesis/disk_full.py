"""The embedded store's disk filling up, on purpose.

`small_tmpfs(directory)` mounts a tmpfs of a few megabytes on `directory`
(root only) and unmounts it afterwards; a sqlite store put there
(`sqlite:///DIR/state.db`) lives on a filesystem the nemesis can fill.
`DiskFiller(directory)` fills that filesystem with one file until the
kernel answers ENOSPC (`fill`), and removes the file again (`free`).

A tmpfs, not the real disk: filling the machine's own filesystem would
fail every other process on it, and a tmpfs is gone the moment it is
unmounted. Used by the chaos suite's nemesis (faults.py, the "disk-full"
fault) and by tests/test_store_disk_full.py.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

# Big writes first, then smaller and smaller ones, so that the filesystem
# ends with no free byte at all, not just no free megabyte.
_FIRST_CHUNK = 1 << 20


class MountRefused(Exception):
    """This process may not mount a tmpfs (not root, or no CAP_SYS_ADMIN)."""


class DiskFiller:
    """Fills the filesystem holding `directory` with the file `name` in it."""

    def __init__(self, directory: str | Path, name: str = "filler") -> None:
        self.path = Path(directory) / name

    @property
    def full(self) -> bool:
        """True while the filler file exists (between `fill` and `free`)."""
        return self.path.exists()

    def fill(self) -> int:
        """Write to the filler until ENOSPC, fsync it; returns the bytes added.

        Filling again adds whatever was freed meanwhile. Errors other than
        ENOSPC (the directory is gone, a read-only filesystem) are raised.
        """
        added = 0
        chunk = _FIRST_CHUNK
        block = memoryview(bytes(chunk))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while chunk:
                try:
                    added += os.write(fd, block[:chunk])
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
            with contextlib.suppress(OSError):  # fsync of a full tmpfs needs no space
                os.fsync(fd)
        finally:
            os.close(fd)
        return added

    def free(self) -> None:
        """Remove the filler, giving its space back. Idempotent."""
        self.path.unlink(missing_ok=True)

    def free_bytes(self) -> int:
        """What the filesystem still offers an unprivileged writer, in bytes."""
        stat = os.statvfs(self.path.parent)
        return stat.f_bavail * stat.f_frsize


@contextlib.contextmanager
def small_tmpfs(directory: str | Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` (mount's syntax: 4m, 512k) mounted on `directory`.

    Creates the directory if missing. Raises MountRefused, with mount's own
    words, when this process may not mount (not root, a container without
    CAP_SYS_ADMIN). Unmounts on the way out, lazily if something still holds
    a file open there (a process the caller failed to stop).
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    try:
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700",
                                  "tmpfs", str(path)], capture_output=True, text=True)
    except FileNotFoundError as e:
        raise MountRefused(f"cannot mount a tmpfs on {path}: {e}") from e
    if mounted.returncode != 0:
        raise MountRefused(f"cannot mount a tmpfs on {path}: "
                           f"{mounted.stderr.strip() or mounted.returncode}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
