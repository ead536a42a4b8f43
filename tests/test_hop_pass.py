"""Hop passes (security/hop.py): issued by the cluster's key, checked by a
replica against the cluster's public keys and revoked subjects (unit tests,
a fake clock)."""

from __future__ import annotations

import pytest

from servefleet._private.security.hop import HopIssuer, HopKey, HopRefused, HopVerifier


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world():
    clock, key = Clock(), HopKey.generate()
    verifier = HopVerifier(clock)
    verifier.trust({key.id: key.public}, {})
    return clock, HopIssuer(key, clock), verifier


def test_a_pass_names_its_caller_and_role(world) -> None:
    _, issuer, verifier = world
    text, expires = issuer.issue("replica:Front-1", "replica", ttl_s=60)
    caller = verifier.check(text)
    assert (caller.subject, caller.role, caller.expires) == ("replica:Front-1", "replica", expires)
    assert caller.may_call_methods
    proxy, _ = issuer.issue("cert:proxy:0a1b", "proxy")
    assert not verifier.check(proxy).may_call_methods  # HTTP, not handle calls


@pytest.mark.parametrize("bad", [None, "", "Bearer x", "sfh1.", "sfh1.a.b", "sfh1.e30.AAAA",
                                 "sfh1." + "A" * 2000 + ".x", "sfh1.\x00.\x00", "sfh1.é.é"])
def test_what_is_not_a_pass_is_refused_by_name(world, bad) -> None:
    _, _, verifier = world
    with pytest.raises(HopRefused, match="x-servefleet-hop"):
        verifier.check(bad)


def test_a_pass_of_another_key_or_altered_is_refused(world) -> None:
    clock, issuer, verifier = world
    stranger = HopIssuer(HopKey.generate(), clock).issue("token:mallory", "admin")[0]
    with pytest.raises(HopRefused, match="key this cluster does not trust"):
        verifier.check(stranger)
    text, _ = issuer.issue("cert:proxy:1", "proxy")
    body, _, signature = text.rpartition(".")
    # The payload of a proxy's pass, made to say admin, keeps the old signature.
    import base64
    import json
    payload = json.loads(base64.urlsafe_b64decode(body[5:] + "=="))
    payload["r"] = "admin"
    forged = "sfh1." + base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(
        b"=").decode() + "." + signature
    with pytest.raises(HopRefused, match="not a pass of this cluster"):
        verifier.check(forged)


def test_expiry_and_revocation(world) -> None:
    clock, issuer, verifier = world
    (key_id,) = verifier._keys
    public = verifier._keys[key_id].public_bytes_raw()
    text, expires = issuer.issue("replica:A-1", "replica", ttl_s=100)
    assert verifier.check(text).subject == "replica:A-1"  # cached from here on
    clock.now = expires
    with pytest.raises(HopRefused, match="expired"):
        verifier.check(text)
    fresh, _ = issuer.issue("token:alice", "deployer", ttl_s=100)
    other, _ = issuer.issue("token:bob", "deployer", ttl_s=100)
    verifier.check(fresh)
    clock.now += 0.5
    verifier.trust({key_id: public}, {"token:alice": clock.now})
    with pytest.raises(HopRefused, match="revoked"):
        verifier.check(fresh)
    assert verifier.check(other).subject == "token:bob"
    # A new token of the same name, issued after the revocation, is served.
    clock.now += 0.002
    renewed, _ = issuer.issue("token:alice", "deployer", ttl_s=100)
    assert verifier.check(renewed).subject == "token:alice"


def test_a_rotated_key_keeps_passes_of_the_old_one_while_trusted(world) -> None:
    clock, issuer, verifier = world
    old, _ = issuer.issue("token:alice", "deployer")
    new_key = HopKey.generate()
    (old_id,) = verifier._keys
    verifier.trust({old_id: verifier._keys[old_id].public_bytes_raw(),
                    new_key.id: new_key.public}, {})
    assert verifier.check(old).subject == "token:alice"
    assert verifier.check(HopIssuer(new_key, clock).issue("token:bob", "admin")[0]).role == \
        "admin"
    verifier.trust({new_key.id: new_key.public}, {})
    with pytest.raises(HopRefused, match="does not trust"):
        verifier.check(old)
