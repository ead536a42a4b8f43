"""The digest of a deployment's working_dir: changed files there are a new code version.

Ray Serve hashes the working_dir package it uploads, so an edited module rolls
out even when nothing else in the config changed. servefleet's replicas run
the working_dir where it is (the process runtime imports from it; the Docker
runtime bind-mounts it), so the controller hashes those same files when it
stores a spec, and the digest goes into the spec's `runtime.working_dir_digest`
and so into the code hash (spec.py).

What is hashed: every regular file and symlink under working_dir that is code
(code_rules.py says which are not: caches, VCS metadata, servefleet config
files, documents, `.servefleetignore` and the spec's `runtime.excludes`), by
relative path and contents (a symlink by its target; it is not followed), in
sorted order. Sockets, FIFOs and devices are skipped. An excluded directory is
not read at all. A tree of more than MAX_FILES files or MAX_BYTES bytes is
refused (InvalidArgument naming the field), since it most likely holds data
that belongs in `excludes`.

The controller's own files are never code, wherever they are: a sqlite store
(`--store sqlite:///...`) and its -wal, -shm and -journal companions may sit
in a working dir (a controller started in the code's directory), and they
change on every write, so hashing them would make every redeploy a new
version. The controller names them (`not_code`, real paths); they are left
out by path, whatever code_rules.py says.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import stat
from collections.abc import Collection

from servefleet._private import state_dir
from servefleet.v1 import deployment_pb2 as dpb

from ..errors import InvalidArgument
from .code_rules import MAX_CONFIG_BYTES, CodeRules, IgnoreFileError, is_config_file

MAX_FILES = 50_000
MAX_BYTES = 512 * 1024 * 1024
_CHUNK = 1024 * 1024


class TreeTooLarge(Exception):
    pass


def tree_digest(root: str, excludes: list[str], max_files: int = MAX_FILES,
                max_bytes: int = MAX_BYTES, not_code: Collection[str] = ()) -> str:
    """The hex digest of the code under `root`; "" if `root` is not a directory here.
    Files named in `not_code` (the controller's own) are left out.

    TreeTooLarge past `max_files` files or `max_bytes` bytes; IgnoreFileError
    for a .servefleetignore that cannot be used.
    """
    if not os.path.isdir(root):
        return ""
    rules = CodeRules.for_tree(root, excludes)
    own = _below(root, not_code)
    digest = hashlib.sha256()
    files = total = 0
    for directory, dirnames, filenames in os.walk(root):
        base = os.path.relpath(directory, root)
        base = "" if base == "." else base + "/"
        # Symlinks to directories are listed among dirnames and not descended:
        # they are hashed as links below, with the files.
        links = [d for d in dirnames if os.path.islink(os.path.join(directory, d))]
        dirnames[:] = sorted(d for d in dirnames
                             if d not in links and not rules.excluded(base + d, d, True)
                             and not state_dir.is_tagged(os.path.join(directory, d)))
        for name in sorted([*filenames, *links]):
            relative = base + name
            if relative in own:
                continue
            path = os.path.join(directory, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue  # removed while we walked
            if rules.excluded(relative, name, stat.S_ISDIR(info.st_mode)):
                continue
            if stat.S_ISLNK(info.st_mode):
                digest.update(b"L\0" + relative.encode() + b"\0"
                              + os.readlink(path).encode() + b"\0")
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if files + 1 > max_files or total + info.st_size > max_bytes:
                raise TreeTooLarge(f"holds more than {max_files} files or "
                                   f"{max_bytes / 2**20:g} MiB (at {relative})")
            content = _file_digest(path, name, info.st_size)
            if content is None:
                continue  # a servefleet config file: what is deployed, not code
            files += 1
            total += info.st_size
            digest.update(b"F\0" + relative.encode() + b"\0"
                          + (b"x" if info.st_mode & 0o111 else b"-") + content + b"\0")
    return digest.hexdigest()[:16]


def _below(root: str, paths: Collection[str]) -> set[str]:
    """The `paths` under `root`, relative to it as the walk names them (real
    paths compared: the walk follows no link below root, so only root's own
    and the paths' may differ)."""
    real_root = os.path.realpath(root)
    found = set()
    for path in paths:
        relative = os.path.relpath(os.path.realpath(path), real_root)
        if relative != os.curdir and relative.split(os.sep, 1)[0] != os.pardir:
            found.add(relative.replace(os.sep, "/"))
    return found


def _file_digest(path: str, name: str, size: int) -> bytes | None:
    """The digest of a file's contents, or None for a servefleet config file."""
    content = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            if size <= MAX_CONFIG_BYTES and name.endswith((".yaml", ".yml")):
                whole = f.read(MAX_CONFIG_BYTES + 1)
                if is_config_file(name, whole):
                    return None
                content.update(whole)
            while chunk := f.read(_CHUNK):
                content.update(chunk)
    except OSError as e:  # unreadable here: its state is what we can hash
        content.update(f"unreadable: {e.strerror}".encode())
    return content.digest()


class WorkingDirDigests:
    """Stamps working_dir digests into runtime options, reading each
    (directory, excludes) once per request however many specs share it.
    `not_code`: the controller's own files (its store's), never hashed."""

    def __init__(self, not_code: Collection[str] = ()) -> None:
        self._known: dict[tuple[str, tuple[str, ...]], str] = {}
        self._not_code = not_code

    async def stamp(self, runtime: dpb.RuntimeOptions, field: str) -> None:
        """Set `runtime.working_dir_digest` from the files (InvalidArgument
        naming `field`.working_dir if there are too many)."""
        key = (runtime.working_dir, tuple(runtime.excludes))
        if not runtime.working_dir:
            runtime.working_dir_digest = ""
            return
        if key not in self._known:
            try:
                self._known[key] = await asyncio.to_thread(
                    tree_digest, runtime.working_dir, list(runtime.excludes),
                    not_code=self._not_code)
            except TreeTooLarge as e:
                raise InvalidArgument(f"{field}.working_dir",
                                      f"{runtime.working_dir} {e}: list what replicas do not "
                                      "need (data, checkpoints) in runtime.excludes") from None
            except IgnoreFileError as e:
                raise InvalidArgument(f"{field}.working_dir", str(e)) from None
        runtime.working_dir_digest = self._known[key]
