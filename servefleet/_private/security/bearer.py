"""Reading a caller's bearer credential, and refusing one that cannot be read.

A credential is `authorization: Bearer TOKEN` (RFC 6750): the scheme in any
case, one or more spaces, and a token of RFC 6750's b64token characters
(letters, digits, `-._~+/`, then `=` padding); the tokens servefleet issues
(`sft_...`, `sfr_...`) are of those. Everything else that a caller puts in
`authorization` is a credential that cannot be read: another scheme, an
empty token, a tab, a NUL or any byte outside printable ASCII, binary
metadata (`authorization-bin`), or several values. The caller then meant
to be someone and is not understood, so it is refused (UNAUTHENTICATED,
HTTP 401) even when it also presents a client certificate: a certificate
never stands in for a token that failed to parse. The reasons name the
problem (a character's position and code), never the value, which may be
a secret.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

TOKEN_METADATA_KEY = "authorization"
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_CREDENTIAL = re.compile(r"(?i:bearer) +(.*)", re.DOTALL)
_BINARY_KEY = TOKEN_METADATA_KEY + "-bin"


class MalformedCredential(ValueError):
    """An authorization value that is not `Bearer TOKEN`; the message says why."""


def token_problem(token: str) -> str | None:
    """Why `token` cannot be sent as a bearer token; None when it can."""
    if not token:
        return "the token is empty"
    for position, char in enumerate(token):
        if not " " < char < "\x7f":
            return (f"the token holds {_named(char)} at character {position + 1}; "
                    "a token is printable ASCII")
    if not _TOKEN.fullmatch(token):
        return ("the token holds characters a bearer token cannot have (letters, digits "
                "and -._~+/ then = padding only)")
    return None


def bearer(value: str | bytes) -> str:
    """The token of one authorization value; MalformedCredential naming why
    it cannot be read."""
    if isinstance(value, bytes):
        raw = value
        try:
            value = raw.decode("ascii")
        except UnicodeDecodeError as e:
            raise MalformedCredential(f"the authorization value holds byte {raw[e.start]:#04x} "
                                      f"at byte {e.start + 1}; it must be printable "
                                      "ASCII") from None
    for position, char in enumerate(value):
        if not " " <= char < "\x7f":
            raise MalformedCredential(f"the authorization value holds {_named(char)} at "
                                      f"character {position + 1}; it must be printable ASCII")
    found = _CREDENTIAL.fullmatch(value)
    if found is None:
        scheme = value.split(" ", 1)[0]
        raise MalformedCredential(f"the authorization value is not a Bearer credential "
                                  f"(scheme {scheme[:20]!r}); send 'Bearer TOKEN'")
    problem = token_problem(found.group(1))
    if problem is not None:
        raise MalformedCredential(problem)
    return found.group(1)


def metadata_bearer(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The token of gRPC metadata's authorization; None when there is none;
    MalformedCredential for one that cannot be read."""
    values = []
    for key, value in metadata or ():
        if key == _BINARY_KEY:
            raise MalformedCredential("binary authorization metadata (authorization-bin) "
                                      "is not read; send 'authorization: Bearer TOKEN'")
        if key == TOKEN_METADATA_KEY:
            values.append(value)
    if not values:
        return None
    if len(values) > 1:
        raise MalformedCredential(f"{len(values)} authorization values; send one")
    return bearer(values[0])


def header_bearer(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The same for an ASGI scope's headers (names lowercase)."""
    values = [v for k, v in headers if k == b"authorization"]
    if not values:
        return None
    if len(values) > 1:
        raise MalformedCredential(f"{len(values)} Authorization headers; send one")
    return bearer(values[0])


def _named(char: str) -> str:
    names = {"\t": "a tab", "\x00": "a NUL", "\n": "a line feed", "\r": "a carriage return",
             " ": "a space"}
    return names.get(char, f"U+{ord(char):04X}")
