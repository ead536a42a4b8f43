"""An Envoy's hop pass, carried in the RDS `servefleet-http` sent to that Envoy alone.

In a cluster with credentials a replica serves only callers with a hop pass
(servefleet/_private/security/hop.py), and an Envoy fed by this server
reaches replicas' HTTP ports in plain text. So the route configuration
`servefleet-http` sent to one xDS client carries, in its
`request_headers_to_add`, `x-servefleet-hop: <a pass issued for that client>`:

- who gets one: a client whose role may ask for a pass (GetHopPass: proxy,
  replica, deployer, admin), authenticated as its stream was (a token, or a
  certificate), named as GetHopPass names it (api/hop_pass.py). The pass's
  role is `proxy` whatever the client's: an Envoy forwards HTTP requests,
  WebSockets and gRPC, never handle calls (`x-servefleet-method` is
  stripped), and a pass read from its configuration dump reaches no more.
  A reader's client gets none: its Envoy's requests are refused (401);
- the header overwrites what a downstream client sent
  (OVERWRITE_IF_EXISTS_OR_ADD, and envoy_http.py lists it in
  `request_headers_to_remove`, which Envoy applies first at the same level;
  the route configuration's headers are applied after the virtual host's
  and the route's): a client of Envoy can neither inject a pass nor read one;
- renewed at half life (PASS_TTL_S / 2 left), as every caller renews: a new
  pass is a new version of the resource, pushed on the stream (its loop looks
  at least every few seconds);
- a subject revoked after its pass was issued (the `hop` snapshot lists it)
  gets no pass on this stream any more: the next response leaves it out.
  (A revoked token or certificate also ends the stream itself: auth.py,
  revocation_checks.py.)

Clusters without credentials build nothing here: every client shares the
one resource. The pass is never logged, and what CSDS shows of the resource
(`shown`) has its value redacted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_pb2
from google.protobuf import any_pb2

from servefleet._private.security.hop import HOP_HEADER, PASS_TTL_S
from servefleet._private.security.roles import may_call
from servefleet.v1 import watch_pb2

from ..errors import ApiError, one_line
from .envoy_http import ROUTE_NAME
from .resources import Resource, digest

if TYPE_CHECKING:
    from ..hop_keys import HopAuthority

logger = logging.getLogger(__name__)
# The role of every pass an xDS client gets: what an Envoy does with it.
PASS_ROLE = "proxy"
REDACTED = "(redacted: the hop pass of this client)"
# (subject, role) of an xDS client, as GetHopPass names it (api/hop_pass.py).
Subjects = Callable[[Any], tuple[str, str]]


class StreamPass:
    """One xDS stream's hop pass: issued for its subject, renewed at half life,
    dropped for good once the subject is revoked."""

    def __init__(self, subject: str, issue: Callable[[], tuple[str, float]] | None,
                 now: Callable[[], float], why_none: str = "") -> None:
        """`issue` gives (a pass, when it expires); None: this client gets no
        pass (`why_none` says why, logged once when it asks for the routes)."""
        self.subject = subject
        self._issue = issue
        self._now = now
        self._why_none = why_none
        self._held: tuple[str, float, float] | None = None  # (pass, issued at, expires)
        self.revoked = False
        # The last resource made: (the shared one's version, the pass) -> ours, and CSDS's.
        self._made: tuple[tuple[str, str], Resource, any_pb2.Any] | None = None

    def current(self, trust: watch_pb2.HopTrust | None) -> str | None:
        """The pass to send now; None when this client gets none."""
        if self._issue is None or self.revoked:
            return None
        if self._held is not None and trust is not None and _revoked(
                trust, self.subject, self._held[1]):
            self.revoked, self._held = True, None
            logger.info("the hop pass of xDS client %s is revoked: its routes no longer "
                        "carry one", self.subject)
            return None
        now = self._now()
        if self._held is None or self._held[2] - now < PASS_TTL_S / 2:
            try:
                text, expires = self._issue()
            except RuntimeError as e:  # the term's key is not loaded: the next look issues
                logger.warning("no hop pass for xDS client %s yet: %s", self.subject, e)
                return self._held[0] if self._held is not None else None
            self._held = (text, now, expires)
        return self._held[0]

    def routes(self, available: dict[str, Resource], trust: watch_pb2.HopTrust | None,
               node: str) -> tuple[dict[str, Resource], dict[str, any_pb2.Any]]:
        """`available` (the RDS resources by name) with `servefleet-http` carrying
        this client's pass, and what CSDS may show of those changed."""
        shared = available.get(ROUTE_NAME)
        if shared is None:
            return available, {}
        text = self.current(trust)
        if text is None:
            if self._why_none:
                logger.info("xDS client %s asks for %s but gets no hop pass (%s): replicas "
                            "of this cluster refuse what its Envoy forwards (401)",
                            one_line(node), ROUTE_NAME, self._why_none)
                self._why_none = ""
            return available, {}
        key = (shared.version, text)
        if self._made is None or self._made[0] != key:
            self._made = (key, *_with_pass(shared, text))
        return {**available, ROUTE_NAME: self._made[1]}, {ROUTE_NAME: self._made[2]}


def term_passes(hop: Callable[[], HopAuthority | None], subjects: Subjects,
                now: Callable[[], float]) -> Callable[[Any], StreamPass | None]:
    """What gives each xDS stream its pass, from the serving term's `hop`."""
    return lambda context: stream_pass(context, hop(), subjects, now)


class PassIssuer(Protocol):
    """What stream_pass needs of the term's HopAuthority (hop_keys.py)."""

    @property
    def required(self) -> bool: ...

    def issue(self, subject: str, role: str) -> tuple[str, float]: ...


def stream_pass(context: Any, hop: PassIssuer | None, subjects: Subjects,
                now: Callable[[], float]) -> StreamPass | None:
    """The pass of the xDS client calling with `context`; None in a cluster
    without credentials (no replica checks a pass) or with no term serving."""
    if hop is None or not hop.required:
        return None
    try:
        role, subject = subjects(context)
    except ApiError as e:  # its stream was authorised: it only has nothing to name
        return StreamPass("", None, now, why_none=e.message)
    if not may_call(role, "GetHopPass"):
        return StreamPass(subject, None, now, why_none=f"the role {role!r} gets none; "
                          "give its Envoy a proxy token")
    return StreamPass(subject, lambda: hop.issue(subject, PASS_ROLE), now)


def _revoked(trust: watch_pb2.HopTrust, subject: str, issued: float) -> bool:
    return any(r.subject == subject and r.revoked_at.ToNanoseconds() / 1e9 >= issued
               for r in trust.revoked)


def _with_pass(shared: Resource, text: str) -> tuple[Resource, any_pb2.Any]:
    config = route_pb2.RouteConfiguration()
    shared.packed.Unpack(config)
    header = config.request_headers_to_add.add(
        header=base_pb2.HeaderValue(key=HOP_HEADER, value=text),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)
    packed = any_pb2.Any()
    packed.Pack(config)
    header.header.value = REDACTED
    shown = any_pb2.Any()
    shown.Pack(config)
    return Resource(shared.name, packed, digest(packed)), shown
