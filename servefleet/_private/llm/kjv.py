"""The King James Bible as training text, read with Debian's `bible` command.

Debian's `bible-kjv` package (with its text, `bible-kjv-text`) installs
`bible`; `bible -f RANGE` prints each verse of a passage range on one line,
"Ge1:1 In the beginning God created the heaven and the earth.". The whole
text, "Gen1:1-Rev22:21", is 31,102 verses, printed in about 0.06 s. The text
is in the public domain (outside the United Kingdom), so servefleet can train
a model on it at start-up without a download.

`bible` exits 0 even for a bad range (it prints "Bad Book: ..." on standard
error and no verses), so a range that gives no verse is the error here.
"""

from __future__ import annotations

import re
import shutil
import subprocess

WHOLE_TEXT = "Gen1:1-Rev22:21"
INSTALL_HINT = "apt-get install bible-kjv"

_VERSE = re.compile(r"^\S*?\d+:\d+\s+(.*\S)")


class TrainingTextError(RuntimeError):
    """The training text cannot be read: no `bible` command, or a bad range."""


def read_verses(passages: str = WHOLE_TEXT, command: str = "bible") -> list[str]:
    """The verses of `passages` (a `bible` range such as "Gen1:1-Gen50:26"),
    without their references. Blocks for the command (about 0.06 s for the
    whole text). Raises TrainingTextError when `command` is not installed,
    fails, or prints no verse for the range."""
    executable = shutil.which(command)
    if executable is None:
        raise TrainingTextError(
            f"the {command!r} command is not installed; the King James Bible "
            f"engine trains on its text: {INSTALL_HINT}"
        )
    done = subprocess.run(
        [executable, "-f", passages], capture_output=True, text=True, check=False, timeout=60
    )
    verses = [m.group(1) for m in map(_VERSE.match, done.stdout.splitlines()) if m]
    if done.returncode != 0 or not verses:
        why = done.stderr.strip() or f"exit status {done.returncode}"
        raise TrainingTextError(f"{command} -f {passages!r} gave no verses: {why}")
    return verses
