"""Certificates revoked one by one: a deny list of serial numbers.

A cluster's CA signs one certificate per role (certs.py), and every process
of that role presents it; a certificate that leaks (a laptop's admin.crt, a
host's proxy.key) would otherwise be trusted until the CA is replaced. The
operator lists its serial number in a file, and every process that accepts
TLS connections refuses it (revocation_checks.py): controllers read the file at start
and on SIGHUP, and tell replicas the list (they may not read the operator's
files once they have dropped privileges).

The file: one serial number per line, in hex, as `openssl x509 -serial
-noout` prints it (`serial=3A1F...`, or the digits alone, any case, colons
allowed); `#` starts a comment. `servefleet certs revoke` appends lines
naming what it revoked. A file that does not parse is refused whole, naming
the line: at start the process does not start, on SIGHUP it keeps the list
it had.

`RevokedSerials` is the list one process checks against, replaced whole on
each reload; checks ask it per connection (TLS) or per call (gRPC, cached
per certificate in tls.peer_serial), and listeners end what is open with a
certificate that the new list names.
"""

from __future__ import annotations

import datetime
import logging
import os
import string
from collections.abc import Callable, Iterable
from pathlib import Path

from cryptography import x509

from .tls import serial_hex

logger = logging.getLogger(__name__)
# RFC 5280: a serial number is at most 20 octets.
MAX_SERIAL_DIGITS = 40
HEADER = ("# servefleet revoked certificates: one serial number per line, hex "
          "(openssl x509 -serial -noout; servefleet certs revoke)")


class RevokedCertsError(ValueError):
    """The deny list or a serial number cannot be used: names the file, line and problem."""


def parse_serial(text: str) -> str:
    """`text` as `serial_hex` gives it: `serial=0A1B`, `0a:1b`, `0x0a1b` and
    `A1B` are all "a1b". RevokedCertsError saying what is wrong otherwise."""
    digits = text.strip()
    if digits.lower().startswith("serial="):
        digits = digits[len("serial="):]
    if digits.lower().startswith("0x"):
        digits = digits[2:]
    digits = digits.replace(":", "")
    if not digits or any(c not in string.hexdigits for c in digits):
        raise RevokedCertsError(f"{text.strip()[:80]!r} is not a serial number in hex "
                                "(as openssl x509 -serial -noout prints it)")
    if len(digits.lstrip("0")) > MAX_SERIAL_DIGITS:
        raise RevokedCertsError(f"{text.strip()[:80]!r}: a serial number has at most "
                                f"{MAX_SERIAL_DIGITS} hex digits (20 octets)")
    return serial_hex(int(digits, 16))


def read_file(path: str | Path) -> frozenset[str]:
    """The serial numbers the file lists; RevokedCertsError naming the file
    (and the line) when it cannot be read or a line is no serial number."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise RevokedCertsError(f"{path}: {getattr(e, 'strerror', None) or e}") from None
    serials = set()
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if line:
            try:
                serials.add(parse_serial(line))
            except RevokedCertsError as e:
                raise RevokedCertsError(f"{path}:{number}: {e}") from None
    return frozenset(serials)


def certificate_serial(path: str | Path) -> tuple[str, str]:
    """The serial number and subject of the PEM certificate at `path`;
    RevokedCertsError when it cannot be read or is no certificate."""
    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except OSError as e:
        raise RevokedCertsError(f"{path}: {e.strerror or e}") from None
    except ValueError:
        raise RevokedCertsError(f"{path}: not a PEM certificate") from None
    return serial_hex(cert.serial_number), cert.subject.rfc4514_string()


def revoke(path: str | Path, serial: str, note: str = "") -> bool:
    """Add `serial` (any form parse_serial takes) to the file, made if
    missing, with `note` and today's date as its comment. False when it was
    listed already (nothing written). RevokedCertsError when the file exists
    but does not parse, or `serial` is none."""
    path = Path(path)
    serial = parse_serial(serial)
    listed = read_file(path) if path.exists() else frozenset()
    if serial in listed:
        return False
    text = path.read_text() if path.exists() else HEADER + "\n"
    if text and not text.endswith("\n"):
        text += "\n"
    today = datetime.date.today().isoformat()
    comment = f"{note}, revoked {today}" if note else f"revoked {today}"
    # Written whole and renamed: a process reading it on SIGHUP sees the old
    # list or the new one, never half a line.
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(f"{text}{serial}  # {comment}\n")
    os.replace(tmp, path)
    return True


class RevokedSerials:
    """The serial numbers one process refuses now. Replaced whole (`replace`);
    `generation` grows with each change, so a connection checked at an older
    one checks again; listeners hear of each change with the serials it added."""

    def __init__(self, serials: Iterable[str] = ()) -> None:
        self._serials = frozenset(serials)
        self.generation = 0
        self._listeners: list[Callable[[frozenset[str]], None]] = []
        self._refused: set[str] = set()

    def first_refusal(self, serial: str) -> bool:
        """True the first time this process refuses `serial`: a caller retrying
        with a revoked certificate gets one log line, not one per attempt."""
        if serial in self._refused:
            return False
        self._refused.add(serial)
        return True

    def __contains__(self, serial: object) -> bool:
        return serial in self._serials

    def __len__(self) -> int:
        return len(self._serials)

    @property
    def serials(self) -> frozenset[str]:
        return self._serials

    def on_change(self, listener: Callable[[frozenset[str]], None]) -> None:
        self._listeners.append(listener)

    def replace(self, serials: Iterable[str]) -> None:
        new = frozenset(serials)
        if new == self._serials:
            return
        added = new - self._serials
        self._serials = new
        self.generation += 1
        for listener in self._listeners:
            try:
                listener(added)
            except Exception:  # one listener's bug must not keep the list from others
                logger.exception("a listener of revoked certificates failed")


class RevokedCertsFile:
    """The list a file gives (`--revoked-certs`), read at start and by
    `reload` (on SIGHUP). RevokedCertsError at start when the file cannot be
    used; on reload a broken file leaves the previous list, with an error
    logged. Without a file the list is empty and stays so."""

    def __init__(self, path: str | Path | None,
                 serials: RevokedSerials | None = None) -> None:
        self.path = Path(path) if path else None
        self.serials = serials if serials is not None else RevokedSerials()
        if self.path is not None:
            self.serials.replace(read_file(self.path))

    def reload(self) -> None:
        if self.path is None:
            return
        try:
            found = read_file(self.path)
        except RevokedCertsError as e:
            logger.error("kept the previous revoked certificates: %s", e)
            return
        self.serials.replace(found)
        logger.info("reloaded %d revoked certificates from %s", len(found), self.path)
