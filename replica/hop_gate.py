"""Who may call this replica's HTTP and gRPC ports (servefleet/_private/security/hop.py).

In a cluster with credentials a replica serves only the cluster's own
callers, loopback included: every local user and process reaches a loopback
port. A caller proves it with its hop pass (`x-servefleet-hop`), or, on a
port served with TLS (hop_tls.py), with the client certificate of the
cluster's CA its handshake already showed. A handle call (pickled arguments:
the caller's code runs here) always needs a pass of a role that may run code
(replica, deployer, admin): a proxy's pass, or a certificate alone, is not
enough. Nothing of a request is read, its body least of all, before this.

The settings carry the keys to check passes by; the Watch stream's `hop`
key brings later ones and the subjects revoked (`on_trust`).

The control port without TLS takes only a controller's pass
(`ControlPassCheck`), checked from the call's metadata before its message
is read, unknown methods included.
"""

from __future__ import annotations

from base64 import b64decode
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

import grpc

from servefleet._private.security.hop import (
    HOP_HEADER,
    HOP_HEADER_BYTES,
    HopRefused,
    HopVerifier,
)
from servefleet.v1 import watch_pb2


class HopGate:
    def __init__(self, required: bool, keys: dict[str, str], tls: bool) -> None:
        self.required = required
        # Callers of a TLS port showed a client certificate of the cluster's CA.
        self._tls = tls
        self.verifier = HopVerifier()
        self.verifier.trust({kid: b64decode(raw) for kid, raw in keys.items()}, {})

    def on_trust(self, trust: watch_pb2.HopTrust) -> None:
        """A `hop` snapshot from the Watch stream."""
        self.required = trust.required
        self.verifier.trust({k.id: k.public_key for k in trust.keys},
                            {r.subject: r.revoked_at.ToNanoseconds() / 1e9 for r in trust.revoked})

    def control_refusal(self, hop: str | None) -> str | None:
        """Why a control call (GetMetadata, CheckHealth, Reconfigure, Drain)
        is not served on a port without TLS: only a controller's pass will do."""
        if not self.required:
            return None
        try:
            caller = self.verifier.check(hop)
        except HopRefused as e:
            return str(e)
        return None if caller.role == "controller" else (
            f"only controllers may call a replica's control port, not {caller.subject}")

    def refusal(self, hop: str | None, method_call: bool = False) -> str | None:
        """Why this caller is not served, or None to serve it."""
        if not self.required or (hop is None and self._tls and not method_call):
            return None
        try:
            caller = self.verifier.check(hop)
        except HopRefused as e:
            return str(e)
        if method_call and not caller.may_call_methods:
            return (f"{caller.subject}'s pass (role {caller.role}) may not make handle calls: "
                    "they run the caller's code here")
        return None


class ControlPassCheck(grpc.aio.ServerInterceptor):
    """The control port's gate where it has no TLS: a call without a
    controller's pass is UNAUTHENTICATED before anything of it is read."""

    def __init__(self, gate: HopGate) -> None:
        self._gate = gate

    async def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        hop = next((str(v) for k, v in details.invocation_metadata or () if k == HOP_HEADER),
                   None)
        refused = self._gate.control_refusal(hop)
        if refused is None:
            return await continuation(details)
        message = f"{details.method}: {refused}"

        async def refuse(requests: Any, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

        # Takes the request stream unread, whatever the method's kind.
        return grpc.stream_stream_rpc_method_handler(refuse)


def without_pass(scope: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """`scope` with the caller's hop pass taken out of its headers: user code
    never sees it (a deployment that answers with its request headers would
    hand a proxy's pass to whoever called the proxy)."""
    headers = scope["headers"]
    if any(name == HOP_HEADER_BYTES for name, _ in headers):
        scope["headers"] = [(name, value) for name, value in headers
                            if name != HOP_HEADER_BYTES]
    return scope


def metadata_without_pass(metadata: Iterable[tuple[str, Any]]) -> tuple[tuple[str, Any], ...]:
    """gRPC metadata without the caller's hop pass, for user code."""
    return tuple((key, value) for key, value in metadata if key != HOP_HEADER)
