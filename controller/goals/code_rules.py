"""Which files under a working_dir are code: the rules the working_dir digest applies.

A file defines a replica's behaviour unless it is not code by any reasonable
reading. Left out, in this order (a later rule wins over an earlier one, as in
gitignore, so a `!pattern` can take back a default):

1. DEFAULT_EXCLUDES: VCS metadata, bytecode and tool caches, virtualenvs,
   servefleet's own state directory, editor and OS droppings, logs, and
   documents (`*.md`, `*.rst`). A model that reads a Markdown prompt
   template takes it back with `!prompt.md`.
2. servefleet config files: a `*.yaml` / `*.yml` file with a top-level
   `applications:` key. Such a file is what a user deploys (its `user_config`
   changes are applied in place), never what a replica runs; see
   `is_config_file`.
3. The patterns in `.servefleetignore` at working_dir's root, one a line,
   `#` starting a comment line.
4. The spec's `runtime.excludes`.

Directories servefleet keeps its own state in are skipped whatever their name
(they hold a CACHEDIR.TAG: servefleet/_private/state_dir.py).

Patterns are gitignore-style:

- `name` (no slash) matches a file or directory of that name at any depth;
- `dir/` (a trailing slash) matches directories only;
- `a/b` or `/a` (a slash before the end) match from working_dir's root;
- `*`, `?` and `[abc]` are wildcards, and `**` spans directories;
- `!pattern` includes again what an earlier pattern left out. As in git, a
  file inside an excluded directory cannot be taken back: the directory is
  never read.

`.gitignore` is deliberately not read: a trained model file is often ignored
by git because it is large, and it is exactly what a new version of the
replicas must pick up.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass

DEFAULT_EXCLUDES = (
    # VCS metadata, bytecode and tool caches, virtualenvs
    ".git/", ".hg/", ".svn/", "__pycache__/", "*.pyc", ".venv/",
    ".mypy_cache/", ".pytest_cache/", ".ruff_cache/",
    # servefleet's own state (`servefleet up --state-dir`) and ignore file
    ".servefleet/", "/.servefleetignore",
    # editors and operating systems
    "*~", "*.swp", "*.swo", ".#*", "#*#", ".DS_Store", ".idea/", ".vscode/",
    # logs and documents
    "*.log", "*.md", "*.rst",
)
IGNORE_FILE = ".servefleetignore"
# An ignore file past these is refused rather than half-read.
MAX_IGNORE_BYTES = 64 * 1024
MAX_IGNORE_PATTERNS = 256
# Config files larger than this are not looked into (and so count as code).
MAX_CONFIG_BYTES = 1024 * 1024
_CONFIG_KEY = re.compile(rb"^applications[ \t]*:", re.MULTILINE)


class IgnoreFileError(ValueError):
    """The working dir's .servefleetignore cannot be used; the message says why."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    dir_only: bool
    anchored: bool  # matched against the path from the root, not the name
    negated: bool   # "!pattern": includes again

    @classmethod
    def parse(cls, text: str) -> Rule:
        negated = text.startswith("!")
        body = text[1:] if negated else text
        dir_only = body.endswith("/")
        body = body.rstrip("/")
        anchored = "/" in body
        body = body.lstrip("/")
        # fnmatch's "*" crosses "/", which gives "**" its gitignore meaning;
        # for anchored patterns a lone "*" then also crosses, a small liberty.
        return cls(re.compile(fnmatch.translate(body)), dir_only, anchored, negated)

    def matches(self, relative: str, name: str, is_dir: bool) -> bool:
        if self.dir_only and not is_dir:
            return False
        return bool(self.pattern.match(relative if self.anchored else name))


class CodeRules:
    """Decides, path by path, whether a file or directory is left out of the code."""

    def __init__(self, patterns: list[str]) -> None:
        self._rules = [Rule.parse(p) for p in patterns if p.lstrip("!").strip("/")]

    @classmethod
    def for_tree(cls, root: str, excludes: list[str]) -> CodeRules:
        """The defaults, then root's .servefleetignore, then `excludes`."""
        return cls([*DEFAULT_EXCLUDES, *read_ignore_file(root), *excludes])

    def excluded(self, relative: str, name: str, is_dir: bool) -> bool:
        for rule in reversed(self._rules):  # the last matching rule decides
            if rule.matches(relative, name, is_dir):
                return not rule.negated
        return False


def read_ignore_file(root: str) -> list[str]:
    """The patterns of root's .servefleetignore ([] without one); IgnoreFileError
    when it is too large, holds too many patterns, or is not UTF-8 text."""
    path = os.path.join(root, IGNORE_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_IGNORE_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return []
    except OSError as e:
        raise IgnoreFileError(f"{path} cannot be read: {e.strerror}") from None
    if len(data) > MAX_IGNORE_BYTES:
        raise IgnoreFileError(f"{path} is larger than {MAX_IGNORE_BYTES // 1024} KiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise IgnoreFileError(f"{path} is not UTF-8 text") from None
    patterns = [line.strip() for line in text.splitlines()]
    patterns = [p for p in patterns if p and not p.startswith("#")]
    if len(patterns) > MAX_IGNORE_PATTERNS:
        raise IgnoreFileError(f"{path} holds more than {MAX_IGNORE_PATTERNS} patterns")
    return patterns


def is_config_file(name: str, head: bytes) -> bool:
    """Whether a file is a servefleet config file, from its name and contents:
    YAML with a top-level `applications:` key (its first MAX_CONFIG_BYTES)."""
    return name.endswith((".yaml", ".yml")) and bool(_CONFIG_KEY.search(head))
