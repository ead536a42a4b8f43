"""Who a GetHopPass caller is, as its pass names it (servefleet/_private/security/hop.py).

The role is the one the call was authorised with (auth.py); the subject is
what a revocation names: the replica a replica token belongs to, a token's
name in the token file, or a certificate's role and serial number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servefleet._private.security.hop import hop_subject
from servefleet._private.security.tls import peer_serial
from servefleet._private.security.tokens import REPLICA_TOKEN_PREFIX, digest

from ..errors import Unauthenticated
from .auth import Authorizer, bearer_token


class HopSubjects:
    def __init__(self, authorizer: Authorizer) -> None:
        self._authorizer = authorizer
        # The replica id whose token has a hash (the serving term's registry).
        self.replica_ids: Callable[[str], str | None] = lambda hashed: None

    def of(self, context: Any) -> tuple[str, str]:
        """(role, subject) of the caller; Unauthenticated when it has neither."""
        role, _ = self._authorizer.caller(context)
        token = bearer_token(context.invocation_metadata())
        if token and token.startswith(REPLICA_TOKEN_PREFIX):
            replica_id = self.replica_ids(digest(token))
            if replica_id is None:
                raise Unauthenticated("unknown replica token (the replica is not in the "
                                      "registry)")
            return role, hop_subject(replica_id)
        if token:
            table = self._authorizer.tokens
            entry = table.lookup(token) if table is not None else None
            if entry is None:
                raise Unauthenticated("unknown or revoked token")
            return role, hop_subject(token_name=entry.name)
        serial = peer_serial(context.auth_context())
        if serial is None:
            raise Unauthenticated("no credentials to name in a hop pass")
        return role, hop_subject(cert=(role, serial))
