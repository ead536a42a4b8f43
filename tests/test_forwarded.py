"""proxy/forwarded.py: what a replica is told about the client, pure."""

from __future__ import annotations

import pytest

from servefleet.proxy.forwarded import Forwarded


def scope(peer: str, *headers: tuple[bytes, bytes], scheme: str = "http") -> dict:
    return {"client": (peer, 5000), "scheme": scheme, "headers": list(headers)}


def test_the_peer_is_added_after_what_came_before() -> None:
    forwarded = Forwarded()
    assert forwarded.headers(scope("10.1.2.3")) == [(b"x-forwarded-for", b"10.1.2.3"),
                                                    (b"x-forwarded-proto", b"http")]
    several = scope("10.1.2.3", (b"x-forwarded-for", b"1.1.1.1"),
                    (b"x-forwarded-for", b"2.2.2.2, 3.3.3.3"), scheme="https")
    assert forwarded.headers(several) == [
        (b"x-forwarded-for", b"1.1.1.1, 2.2.2.2, 3.3.3.3, 10.1.2.3"),
        (b"x-forwarded-proto", b"https")]
    assert forwarded.headers({"client": None, "scheme": "http", "headers": []}) == []


def test_only_a_trusted_peer_says_how_the_client_came() -> None:
    says_https = (b"x-forwarded-proto", b"HTTPS")
    forwarded = Forwarded("10.0.0.0/8, ::1")
    assert dict(forwarded.headers(scope("10.9.9.9", says_https)))[b"x-forwarded-proto"] == \
        b"https"
    assert dict(forwarded.headers(scope("::1", says_https)))[b"x-forwarded-proto"] == b"https"
    assert dict(forwarded.headers(scope("11.0.0.1", says_https)))[b"x-forwarded-proto"] == \
        b"http"
    nonsense = (b"x-forwarded-proto", b"gopher")
    assert dict(forwarded.headers(scope("10.9.9.9", nonsense)))[b"x-forwarded-proto"] == b"http"
    assert Forwarded("*").trusts("203.0.113.7") and not Forwarded("").trusts("127.0.0.1")
    assert not Forwarded().trusts("unix-socket")


def test_an_entry_that_is_not_an_address_is_named() -> None:
    with pytest.raises(ValueError, match="'lb' is not an IP address or network"):
        Forwarded("10.0.0.0/8,lb")
