"""The controller's revoked certificates (servefleet/_private/security/revocation.py).

`CertRevocation` owns the list from --revoked-certs (read at start; again by
`reload`, on SIGHUP), the check of the gRPC server's callers
(`interceptors`; the HTTP face checks with `serials` in its TLS context),
and what a change sets off while this controller leads: the trust on the
Watch stream's `hop` key is published again, which is how replicas learn the
list, and the hop passes the newly revoked certificates got are revoked
(replicas' ports without TLS would take them until they expire).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from servefleet._private.security.revocation import RevokedCertsFile, RevokedSerials
from servefleet._private.security.revocation_checks import RevokedCertInterceptor

from .api.hop_pass import revoke_certificate_passes

if TYPE_CHECKING:
    from .term import LeaderTerm


class CertRevocation:
    def __init__(self, path: str | Path | None, tls: bool,
                 term: Callable[[], LeaderTerm | None]) -> None:
        """RevokedCertsError when the file cannot be used."""
        self._file = RevokedCertsFile(path)
        self._tls = tls
        self._term = term
        self._file.serials.on_change(self._changed)

    @property
    def serials(self) -> RevokedSerials:
        return self._file.serials

    def reload(self) -> None:
        self._file.reload()

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """For the gRPC server, outermost: a revoked caller learns nothing, not
        even who leads. None without TLS (no certificate to check)."""
        return [RevokedCertInterceptor(self.serials)] if self._tls else []

    def _changed(self, added: frozenset[str]) -> None:
        term = self._term()
        if term is not None:
            term.hop.publish()
            revoke_certificate_passes(term.hop, added)
