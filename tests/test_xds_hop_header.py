"""An Envoy's hop pass in its RDS `servefleet-http` (controller/xds/hop_header.py):
the pass's renewal and revocation under a fake clock, and an ADS stream of a
real grpc.aio server in this process sending each client its own routes."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_pb2
from envoy.service.discovery.v3 import discovery_pb2
from envoy.service.status.v3 import csds_pb2
from google.protobuf.timestamp_pb2 import Timestamp
from test_xds_server import Stream, served_ads

from servefleet._private.security.hop import (
    HOP_HEADER,
    PASS_TTL_S,
    HopIssuer,
    HopKey,
    HopRefused,
    HopVerifier,
)
from servefleet._private.wire import HOP_KEY, ROUTES_KEY
from servefleet.controller.errors import Unauthenticated
from servefleet.controller.watch import Publisher
from servefleet.controller.xds.ads import AggregatedDiscovery
from servefleet.controller.xds.build import build
from servefleet.controller.xds.csds import ClientStatus
from servefleet.controller.xds.hop_header import REDACTED, StreamPass, stream_pass
from servefleet.controller.xds.resources import ROUTE
from servefleet.v1 import watch_pb2

ROUTES = watch_pb2.RouteTable(routes=[watch_pb2.Route(route_prefix="/", application="site",
                                                      deployment="Web")])


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Hop:
    """What stream_pass reads of the term's HopAuthority: a real issuer."""

    def __init__(self, clock: Clock, required: bool = True) -> None:
        self.key = HopKey.generate()
        self.required = required
        self._issuer = HopIssuer(self.key, clock)

    def issue(self, subject: str, role: str) -> tuple[str, float]:
        return self._issuer.issue(subject, role)


def trust(*revoked: tuple[str, float]) -> watch_pb2.HopTrust:
    out = watch_pb2.HopTrust(required=True)
    for subject, at in revoked:
        stamp = Timestamp()
        stamp.FromNanoseconds(int(at * 1e9))
        out.revoked.add(subject=subject, revoked_at=stamp)
    return out


def hop_header(packed) -> list[base_pb2.HeaderValueOption]:
    config = route_pb2.RouteConfiguration()
    assert packed.Unpack(config)
    return [h for h in config.request_headers_to_add if h.header.key == HOP_HEADER]


def test_a_pass_is_renewed_at_half_life_and_dropped_once_revoked() -> None:
    clock = Clock()
    hop = Hop(clock)
    held = StreamPass("token:edge", lambda: hop.issue("token:edge", "proxy"), clock)
    first = held.current(trust())
    assert held.current(trust()) == first
    clock.now += PASS_TTL_S / 2 - 1  # not yet half of its life
    assert held.current(trust()) == first
    clock.now += 2
    renewed = held.current(trust())
    assert renewed != first
    # A revocation before this pass was issued does not touch it (a new token
    # of the same name); one after it takes it, for good.
    assert held.current(trust(("token:edge", clock.now - 10))) == renewed
    assert held.current(trust(("token:other", clock.now + 1))) == renewed
    clock.now += 5
    assert held.current(trust(("token:edge", clock.now))) is None
    clock.now += PASS_TTL_S
    assert held.current(trust()) is None


def test_who_gets_a_pass() -> None:
    clock = Clock()
    hop = Hop(clock)

    def as_role(role: str):
        return lambda context: (role, f"token:{role}-1")
    for role in ("proxy", "deployer", "admin", "replica"):
        held = stream_pass(None, hop, as_role(role), clock)
        assert held is not None and held.current(None), role
        # Whatever the client's role, its Envoy's pass is a proxy's: no handle calls.
        verifier = HopVerifier(clock)
        verifier.trust({hop.key.id: hop.key.public}, {})
        caller = verifier.check(held.current(None))
        assert (caller.subject, caller.role) == (f"token:{role}-1", "proxy")
    for role in ("reader", "controller"):
        held = stream_pass(None, hop, as_role(role), clock)
        assert held is not None and held.current(None) is None

    def nobody(context):
        raise Unauthenticated("no credentials to name in a hop pass")
    assert stream_pass(None, hop, nobody, clock).current(None) is None
    # No credentials in the cluster: nothing is made, the routes are shared.
    assert stream_pass(None, Hop(clock, required=False), as_role("admin"), clock) is None
    assert stream_pass(None, None, as_role("admin"), clock) is None


def test_the_shared_routes_strip_a_clients_pass() -> None:
    """No client of an Envoy brings its own pass (or a forged one) through it."""
    config = route_pb2.RouteConfiguration()
    assert build(ROUTES, {}).by_type[ROUTE]["servefleet-http"].packed.Unpack(config)
    assert HOP_HEADER in config.request_headers_to_remove
    assert not [h for h in config.request_headers_to_add if h.header.key == HOP_HEADER]


@pytest.fixture
async def ads():
    clock = Clock()
    hop = Hop(clock)
    publisher = Publisher()
    publisher.publish(ROUTES_KEY, routes=ROUTES)
    publisher.publish(HOP_KEY, hop=trust())
    roles = {"edge": "proxy", "looker": "reader"}

    def subjects(context) -> tuple[str, str]:
        node = dict(context.invocation_metadata())["node"]
        return roles[node], f"token:{node}"

    async def refuse(context) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")

    service = AggregatedDiscovery(lambda: publisher, lambda: True, refuse,
                                  hop_pass=lambda context: stream_pass(context, hop, subjects,
                                                                       clock))
    async with served_ads(service) as stub:
        yield clock, hop, publisher, stub, service


def routes_request(nonce: str = "", version: str = "") -> discovery_pb2.DiscoveryRequest:
    return discovery_pb2.DiscoveryRequest(type_url=ROUTE, resource_names=["servefleet-http"],
                                          response_nonce=nonce, version_info=version)


async def test_each_client_gets_its_own_pass_renewed_and_revoked(ads) -> None:
    clock, hop, publisher, stub, service = ads
    verifier = HopVerifier(clock)
    verifier.trust({hop.key.id: hop.key.public}, {})
    edge = _Reading(stub, "edge")
    looker = _Reading(stub, "looker")
    try:
        await edge.write(routes_request())
        await looker.write(routes_request())
        first = await edge.next()
        (header,) = hop_header(first.resources[0])
        assert header.append_action == base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
        assert verifier.check(header.header.value).subject == "token:edge"
        # A reader's client gets the shared routes: no pass.
        plain = await looker.next()
        assert hop_header(plain.resources[0]) == []
        assert plain.version_info != first.version_info
        await edge.write(routes_request(first.nonce, first.version_info))  # ACK
        await edge.quiet(0.3)

        # CSDS shows the resource with the pass's value redacted.
        status = await ClientStatus(service).FetchClientStatus(csds_pb2.ClientStatusRequest(),
                                                               None)
        shown = [c for config in status.config for c in config.generic_xds_configs]
        assert header.header.value not in str(status)
        assert [h.header.value for c in shown for h in hop_header(c.xds_config)] == [REDACTED]

        # Past half of its life the pass is renewed: a new version, with no
        # change in the cluster (the stream's loop looks every few seconds).
        clock.now += PASS_TTL_S / 2 + 1
        renewed = await edge.next(timeout=10)
        (again,) = hop_header(renewed.resources[0])
        assert renewed.version_info != first.version_info
        assert again.header.value != header.header.value
        assert verifier.check(again.header.value).subject == "token:edge"
        await edge.write(routes_request(renewed.nonce, renewed.version_info))

        # Its subject revoked (the `hop` snapshot says so): routes without a pass.
        publisher.publish(HOP_KEY, hop=trust(("token:edge", clock.now)))
        revoked = await edge.next()
        assert hop_header(revoked.resources[0]) == []
        assert revoked.version_info == plain.version_info
        await looker.quiet()
    finally:
        edge.close()
        looker.close()
    with pytest.raises(HopRefused):
        verifier.trust({hop.key.id: hop.key.public}, {"token:edge": clock.now})
        verifier.check(again.header.value)


class _Reading(Stream):
    """A Stream whose calls say which client they are (the test's `node` metadata)."""

    def __init__(self, stub, node: str) -> None:
        self.call = stub.StreamAggregatedResources(metadata=(("node", node),))
        self.got: asyncio.Queue = asyncio.Queue()
        self._reader = asyncio.ensure_future(self._read())
