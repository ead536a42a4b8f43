"""Directories servefleet writes its own state into are tagged as such.

`servefleet up`'s state directory (the sqlite store, the replicas' logs) and
the process runtime's directory hold a CACHEDIR.TAG file, as the Cache
Directory Tagging Specification (https://bford.info/cachedir/) defines it.
The working_dir digest (controller/goals/code_rules.py) skips a directory
so tagged, whatever its name, so a state directory put inside a working dir
(`servefleet up --state-dir state` in the project's folder) is not code and
its ever-changing files roll out nothing; `tar --exclude-caches`, borg and
restic skip it too.
"""

from __future__ import annotations

import os

TAG_NAME = "CACHEDIR.TAG"
SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
_TEXT = SIGNATURE + (b"\n# This directory holds servefleet's state (store, logs, replica "
                     b"settings), not code.\n# For information about cache directory tags, "
                     b"see https://bford.info/cachedir/\n")


def tag(directory: str | os.PathLike[str]) -> None:
    """Create `directory` if need be and tag it (once: an existing tag is kept)."""
    os.makedirs(directory, mode=0o711, exist_ok=True)  # what is inside says who reads it
    path = os.path.join(directory, TAG_NAME)
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(_TEXT)


def is_tagged(directory: str) -> bool:
    """Whether `directory` holds a CACHEDIR.TAG that starts with the signature."""
    try:
        with open(os.path.join(directory, TAG_NAME), "rb") as f:
            return f.read(len(SIGNATURE)) == SIGNATURE
    except OSError:
        return False
