"""What is said about an option that is accepted but renamed, or not used.

Options from Ray Serve (servefleet/_private/configuration/ray_options.py) are accepted under their
old names and even when servefleet has no use for them, so that a ported
program runs; the user still hears of each. Who hears, and how, depends on
where the option was written, so parsers take a `Notes` callable:

- in code (`default_notes`): a renamed key is a DeprecationWarning pointing
  at the user's line (the first frame outside servefleet), as Ray warns; an
  option not used is one log line on the logger `servefleet._private.configuration.options`, once
  per option and process (a program ported from Ray would otherwise log one
  per deployment);
- in a config file: one warning line each (servefleet/_private/configuration/config_file.py);
- in the controller, which gets options the SDK has already spoken about:
  `quiet_notes`.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import NamedTuple

logger = logging.getLogger("servefleet._private.configuration.options")


class Note(NamedTuple):
    """Something said about an option that is accepted: renamed or not used."""
    option: str  # the option's name, without the path to it (for "once per option")
    message: str  # starts with the path
    deprecated: bool  # a renamed key (else: accepted and not used)


Notes = Callable[[Note], None]

# servefleet/, not _private/: frames of servefleet.serve are servefleet's too.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_noted: set[str] = set()


def _user_stacklevel() -> int:
    """The stacklevel of the first frame outside servefleet, seen from the
    caller of warnings.warn: the user's line that passed the option."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def default_notes(note: Note) -> None:
    """Renamed keys: a DeprecationWarning at the user's line. Options not
    used: a log line, once per option in this process."""
    if note.deprecated:
        warnings.warn(note.message, DeprecationWarning, stacklevel=_user_stacklevel())
    elif note.option not in _noted:
        _noted.add(note.option)
        logger.warning("%s", note.message)


def quiet_notes(note: Note) -> None:
    """For options already noted where they were written (the controller)."""
