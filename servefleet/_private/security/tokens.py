"""Bearer tokens for humans and scripts, kept in a file as hashes.

One token per line: `NAME ROLE sha256:HEX`, `#` starts a comment. The file
never holds a token itself: `create` prints the new token once and appends
its SHA-256. A token is 32 random bytes, so a plain hash cannot be searched
back to it; no salt is needed. The controller loads the file at start and on
SIGHUP (`TokenTable.load`); a file that does not parse is refused as a whole,
and a controller already running keeps its previous table.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from .roles import TOKEN_ROLES

logger = logging.getLogger(__name__)
PREFIX = "sft_"
# Tokens the controller issues to the replicas it starts (api/auth.py).
REPLICA_TOKEN_PREFIX = "sfr_"
HASH_PREFIX = "sha256:"


class TokenFileError(ValueError):
    """The token file cannot be used: names the file, line and problem."""


@dataclass(frozen=True)
class TokenEntry:
    name: str
    role: str
    digest: str  # hex SHA-256 of the token


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _parse(path: Path) -> list[TokenEntry]:
    try:
        text = path.read_text()
    except OSError as e:
        raise TokenFileError(f"{path}: {e.strerror or e}") from None
    entries: list[TokenEntry] = []
    names: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        where = f"{path}:{number}"
        if len(parts) != 3 or not parts[2].startswith(HASH_PREFIX):
            raise TokenFileError(f"{where}: expected 'NAME ROLE sha256:HEX'")
        name, role, hashed = parts[0], parts[1], parts[2][len(HASH_PREFIX):]
        if role not in TOKEN_ROLES:
            raise TokenFileError(f"{where}: role {role!r} is not one of {', '.join(TOKEN_ROLES)}")
        if len(hashed) != 64 or any(c not in "0123456789abcdef" for c in hashed):
            raise TokenFileError(f"{where}: the hash must be 64 lowercase hex digits")
        if name in names:
            raise TokenFileError(f"{where}: the name {name!r} appears twice")
        names.add(name)
        entries.append(TokenEntry(name, role, hashed))
    return entries


def _write(path: Path, entries: list[TokenEntry]) -> None:
    lines = ["# servefleet tokens: NAME ROLE sha256:HEX (servefleet token create/revoke)"]
    lines += [f"{e.name} {e.role} {HASH_PREFIX}{e.digest}" for e in entries]
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def create(path: str | Path, name: str, role: str) -> str:
    """Append a new token for `name` with `role` and return the token.
    TokenFileError when the name exists, the role is unknown, or the name
    is not 1-64 characters without spaces or '#'."""
    path = Path(path)
    if not name or len(name) > 64 or any(c.isspace() or c == "#" for c in name):
        raise TokenFileError(f"name {name[:64]!r}: 1-64 characters, no spaces or '#'")
    if role not in TOKEN_ROLES:
        raise TokenFileError(f"role {role!r} is not one of {', '.join(TOKEN_ROLES)}")
    entries = _parse(path) if path.exists() else []
    if any(e.name == name for e in entries):
        raise TokenFileError(f"{path}: a token named {name!r} exists; revoke it first")
    token = PREFIX + secrets.token_urlsafe(32)
    _write(path, [*entries, TokenEntry(name, role, digest(token))])
    return token


def revoke(path: str | Path, name: str) -> None:
    """Remove the token named `name`; TokenFileError when there is none."""
    path = Path(path)
    entries = _parse(path)
    kept = [e for e in entries if e.name != name]
    if len(kept) == len(entries):
        raise TokenFileError(f"{path}: no token named {name[:64]!r}")
    _write(path, kept)


class TokenFile:
    """A token file's table, read at start and again by `reload` (on SIGHUP).

    TokenFileError at start when the file cannot be used; on reload a broken
    file leaves the previous table in force, with an error logged. `table`
    is None when no file was given (no tokens at all).
    """

    def __init__(self, path: str | Path | None, what: str = "tokens") -> None:
        self._path = Path(path) if path else None
        self._what = what
        self.table = TokenTable.load(self._path) if self._path else None

    def reload(self) -> None:
        if self._path is None:
            return
        try:
            self.table = TokenTable.load(self._path)
        except TokenFileError as e:
            logger.error("kept the previous %s: %s", self._what, e)
            return
        logger.info("reloaded %d %s from %s", len(self.table), self._what, self._path)


class TokenTable:
    """The tokens a controller accepts, by hash."""

    def __init__(self, entries: list[TokenEntry] | None = None) -> None:
        self._by_digest = {e.digest: e for e in entries or []}

    @classmethod
    def load(cls, path: str | Path) -> TokenTable:
        return cls(_parse(Path(path)))

    def __len__(self) -> int:
        return len(self._by_digest)

    def lookup(self, token: str) -> TokenEntry | None:
        return self._by_digest.get(digest(token))

    def by_digest(self, hashed: str) -> TokenEntry | None:
        return self._by_digest.get(hashed)

    def entries(self) -> list[TokenEntry]:
        return list(self._by_digest.values())
