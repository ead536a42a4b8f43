"""Who is calling the controller, and may that role call this method.

`Authorizer.check` runs before every ControllerService handler (through
servefleet._private.grpc_guard.Guard). The caller's role comes from its bearer token
when it sends one, else from the OU of its client certificate (mutual TLS);
roles and their methods are in servefleet/_private/security/roles.py.
An authorization it sends that cannot be read (servefleet/_private/security/
bearer.py: not `Bearer TOKEN`, binary, several values) is UNAUTHENTICATED
even beside a valid certificate.

- Neither `--auth-tokens` nor TLS configured: every caller is admin (the
  local default; `servefleet up` says so).
- No credentials, or a token that is unknown or revoked, or one sent to a
  controller that takes no tokens: UNAUTHENTICATED.
- A role without the method (or a key it may not watch): PERMISSION_DENIED
  naming the method and the role.

The token file is read at start and again on SIGHUP (`reload`); a file that
does not parse leaves the previous table in force, with an error logged.
A reload also ends every open stream (Watch, xDS, GetLogs, StreamLoad)
that a token no longer in the table, or now of another role, opened: its
client sees CANCELLED, and its reconnection is refused like any new call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import grpc

from servefleet._private.grpc_guard import Refused
from servefleet._private.security.bearer import MalformedCredential, metadata_bearer
from servefleet._private.security.roles import CONTROLLER_API, may_call, unwatchable_key
from servefleet._private.security.tls import peer_role
from servefleet._private.security.tokens import REPLICA_TOKEN_PREFIX, TokenFile, TokenTable, digest
from servefleet.v1 import watch_pb2

from ..errors import MAX_MESSAGE_CHARS, ApiError, PermissionDenied, Unauthenticated, one_line

logger = logging.getLogger(__name__)
# Watch streams that announce themselves as a component (and so appear in
# status and in the scrape targets) need that component's role.
# Methods whose calls last: a reload ends those its revoked tokens opened.
STREAMS = frozenset({"Watch", "GetLogs", "StreamLoad"})
KINDS_BY_ROLE = {watch_pb2.WATCHER_KIND_PROXY: frozenset({"proxy", "admin"}),
                 watch_pb2.WATCHER_KIND_REPLICA: frozenset({"replica", "admin"})}


class CallContext(Protocol):
    """What the authorizer reads of a call (grpc.aio.ServicerContext has both)."""

    def invocation_metadata(self) -> Any: ...

    def auth_context(self) -> Mapping[str, Iterable[bytes]]: ...


def bearer_token(metadata: Any) -> str | None:
    """The caller's bearer token; None when it sends no authorization;
    Unauthenticated naming the problem for one that cannot be read (bearer.py):
    such a caller is refused, whatever certificate it also presents."""
    try:
        return metadata_bearer(metadata)
    except MalformedCredential as e:
        raise Unauthenticated(f"unreadable credentials: {e}") from None


class Authorizer:
    def __init__(self, tokens_path: str | Path | None = None, tls: bool = False) -> None:
        """TokenFileError when `tokens_path` cannot be read or parsed."""
        self._file = TokenFile(tokens_path)
        self._tls = tls
        # The replica (application, deployment) whose token has a hash, from
        # the serving term's registry (set by the server); None: no such replica.
        self.replica_tokens: Callable[[str], tuple[str, str] | None] = lambda hashed: None
        # Streams opened with a token: their task -> (context, the token's digest, role).
        self._streams: dict[asyncio.Task[Any], tuple[Any, str, str]] = {}

    def reload(self) -> None:
        """Reread the token file; end the streams of tokens revoked or changed."""
        self._file.reload()
        table = self.tokens
        for task, (context, hashed, role) in list(self._streams.items()):
            entry = table.by_digest(hashed) if table is not None else None
            if entry is None or entry.role != role:
                why = "revoked" if entry is None else "whose role changed"
                logger.info("ending a stream opened with a token %s: %s", why,
                            task.get_name())
                self._streams.pop(task, None)
                asyncio.get_running_loop().create_task(
                    _end(task, context, f"the token was {why}"))

    def _track(self, context: Any, token: str, role: str) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._streams[task] = (context, digest(token), role)
            task.add_done_callback(lambda done: self._streams.pop(done, None))

    @property
    def tokens(self) -> TokenTable | None:
        return self._file.table

    @property
    def enabled(self) -> bool:
        return self.tokens is not None or self._tls

    def role(self, context: CallContext) -> str:
        """The caller's role; Unauthenticated when it has none."""
        return self.caller(context)[0]

    def caller(self, context: CallContext) -> tuple[str, tuple[str, str] | None]:
        """The caller's role, and for a replica that sent its own token the
        (application, deployment) it belongs to; Unauthenticated without a role."""
        if not self.enabled:
            return "admin", None
        token = bearer_token(context.invocation_metadata())
        if token is not None:
            if token.startswith(REPLICA_TOKEN_PREFIX):
                owner = self.replica_tokens(digest(token))
                if owner is None:
                    raise Unauthenticated("unknown replica token (the replica is not in "
                                          "the registry)")
                return "replica", owner
            if self.tokens is None:
                raise Unauthenticated("this controller takes no tokens (it runs without "
                                      "--auth-tokens); present a client certificate")
            entry = self.tokens.lookup(token)
            if entry is None:
                raise Unauthenticated("unknown or revoked token")
            return entry.role, None
        role = peer_role(context.auth_context()) if self._tls else None
        if role is None:
            raise Unauthenticated("no credentials: send a token (authorization: Bearer ...)"
                                  + (" or a client certificate" if self._tls else ""))
        if role not in CONTROLLER_API:
            raise Unauthenticated(f"a client certificate for {role!r} carries no role "
                                  "here; send a token with it")
        return role, None

    async def check(self, method: str, request: Any, context: CallContext) -> None:
        try:
            role, owner = self.caller(context)
            token = bearer_token(context.invocation_metadata()) if self.tokens else None
            if token and owner is None and method in STREAMS:
                self._track(context, token, role)
            if not may_call(role, method):
                raise PermissionDenied(f"{method}: the role {role!r} may not call it")
            if method == "Watch" and request is not None:
                kind = KINDS_BY_ROLE.get(request.kind)
                if kind is not None and role not in kind:
                    raise PermissionDenied(f"Watch: only {' or '.join(sorted(kind))} may "
                                           f"watch as a {watch_pb2.WatcherKind.Name(request.kind)}"
                                           f" (the role is {role!r})")
                key = unwatchable_key(role, list(request.known), owner)
                if key is not None:
                    raise PermissionDenied(f"Watch: known[{key[:200]!r}]: the role {role!r} "
                                           "may watch only routes and replicas keys"
                                           + (" and its own deployment's config"
                                              if owner else ""))
        except ApiError as e:
            logger.info("refused %s: %s", method, one_line(e.message, MAX_MESSAGE_CHARS))
            raise Refused(e.code, e.message) from None


async def _end(task: asyncio.Task[Any], context: Any, why: str) -> None:
    """Finish a stream from outside its handler: the status goes to the client
    (cancelling the handler alone leaves the call open), then the handler stops."""
    with contextlib.suppress(Exception):
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
    task.cancel()
