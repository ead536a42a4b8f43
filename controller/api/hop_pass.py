"""Who a GetHopPass caller is, as its pass names it (servefleet/_private/security/hop.py).

The role is the one the call was authorised with (auth.py); the subject is
what a revocation names: the replica a replica token belongs to, a token's
name in the token file, or a certificate's role and serial number.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from servefleet._private.security.hop import hop_subject
from servefleet._private.security.roles import CONTROLLER_API, may_call
from servefleet._private.security.tls import peer_serial
from servefleet._private.security.tokens import REPLICA_TOKEN_PREFIX, TokenTable, digest

from ..errors import Unauthenticated
from .auth import Authorizer, bearer_token

if TYPE_CHECKING:
    from ..hop_keys import HopAuthority

logger = logging.getLogger(__name__)


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


def revoked_token_subjects(before: TokenTable | None, after: TokenTable | None) -> list[str]:
    """The subjects whose hop passes a token file reload revokes: each name
    whose token is gone, or is now another token or another role."""
    now = {e.name: (e.digest, e.role) for e in (after.entries() if after else [])}
    return sorted(hop_subject(token_name=e.name) for e in (before.entries() if before else [])
                  if now.get(e.name) != (e.digest, e.role))


def revoke_replaced_tokens(hop: HopAuthority, before: TokenTable | None,
                           after: TokenTable | None) -> None:
    """After a token file reload: revoke, in the background, the passes of
    tokens gone or replaced (a failure is logged; the leader's next reload
    tries again)."""
    _revoke_in_background(hop, revoked_token_subjects(before, after))


def revoked_certificate_subjects(serials: Iterable[str]) -> list[str]:
    """The subjects of the passes certificates with these serial numbers may
    hold: a pass names its certificate's role, which the serial alone does not
    tell, so one per role that may ask for a pass."""
    roles = [role for role in CONTROLLER_API if may_call(role, "GetHopPass")]
    return sorted(hop_subject(cert=(role, serial)) for serial in serials for role in roles)


def revoke_certificate_passes(hop: HopAuthority, serials: Iterable[str]) -> None:
    """After certificates are revoked (--revoked-certs, SIGHUP on the leader):
    revoke, in the background, the passes they got, which replicas' ports
    without TLS would take until they expire (a failure is logged)."""
    _revoke_in_background(hop, revoked_certificate_subjects(serials))


def _revoke_in_background(hop: HopAuthority, subjects: list[str]) -> None:
    if not subjects:
        return

    def logged(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("could not revoke the hop passes of %s: %s", ", ".join(subjects),
                         task.exception())
    asyncio.get_running_loop().create_task(hop.revoke(subjects)).add_done_callback(logged)
