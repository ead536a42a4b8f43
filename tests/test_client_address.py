"""The replica's client address from a proxy's headers: the same answers as
uvicorn's ProxyHeadersMiddleware (which it replaces, remembering them)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from servefleet.replica.client_address import ClientAddress

TRUSTED = ["127.0.0.1,::1", "*", "10.0.0.0/8, 192.168.1.1", "127.0.0.1,", "unix-peer", "",
           "10.0.0.0/8,*", " *"]
PEERS = [("127.0.0.1", 5000), ("::1", 5000), ("10.1.2.3", 1), ("8.8.8.8", 1), None,
         ("unix-peer", 0)]
FORWARDED_FOR = [None, b"1.2.3.4", b"1.2.3.4, 127.0.0.1", b"127.0.0.1", b"5.6.7.8, 1.2.3.4",
                 b"1.2.3.4:8080", b"[2001:db8::1]:443", b"[2001:db8::1]", b"2001:db8::2",
                 b"1.2.3.4, ", b"", b" , 10.9.9.9", b"[::1", b"1.2.3.4:http", b"[::2]:x",
                 b"garbage, 192.168.1.1", b"nonsense", b"::1, 127.0.0.1",
                 b"10.1.1.1, 10.2.2.2", b"1.2.3.4:+80", b"1.2.3.4: 80", b"1.2.3.4:8_0",
                 b"127.0.0.1:-1", b"[::1]:-1", b"1.2.3.4:" + b"9" * 5000]
PROTO = [None, b"https", b"http", b" wss ", b"ftp", b"HTTPS"]


async def _seen(middleware: Any, scope: dict[str, Any]) -> tuple[Any, Any]:
    seen: dict[str, Any] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.update(client=scope.get("client"), scheme=scope.get("scheme"))

    await middleware(app)(dict(scope), None, None)
    return seen["client"], seen["scheme"]


def _scopes() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for trusted, peer, forwarded, proto, kind in itertools.product(
            TRUSTED, PEERS, FORWARDED_FOR, PROTO, ("http", "websocket")):
        headers = [(b"host", b"x")]
        if forwarded is not None:
            headers.append((b"x-forwarded-for", forwarded))
        if proto is not None:
            headers.append((b"x-forwarded-proto", proto))
        cases.append((trusted, {"type": kind, "client": peer, "headers": headers,
                                "scheme": "http" if kind == "http" else "ws"}))
    # Two x-forwarded-for headers read as one list.
    cases.append(("127.0.0.1", {"type": "http", "client": ("127.0.0.1", 1), "scheme": "http",
                                "headers": [(b"x-forwarded-for", b"9.9.9.9"),
                                            (b"x-forwarded-for", b"1.1.1.1, 127.0.0.1")]}))
    return cases


async def test_every_case_reads_as_uvicorns() -> None:
    for trusted, scope in _scopes():
        theirs = await _seen(lambda app, t=trusted: ProxyHeadersMiddleware(app, t), scope)
        ours = await _seen(lambda app, t=trusted: ClientAddress(app, t), scope)
        assert ours == theirs, (trusted, scope)


async def test_answers_are_remembered_and_stay_the_same() -> None:
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["client"])

    middleware = ClientAddress(app, "127.0.0.1")
    nothing: Any = None
    for _ in range(3):
        await middleware({"type": "http", "client": ("127.0.0.1", 1), "scheme": "http",
                          "headers": [(b"x-forwarded-for", b"203.0.113.9, 127.0.0.1")]},
                         nothing, nothing)
    assert seen == [("203.0.113.9", 0)] * 3
    assert list(middleware._clients) == [b"203.0.113.9, 127.0.0.1"]


@pytest.mark.parametrize("trusted", ["127.0.0.1", "*"])
async def test_an_untrusted_peer_changes_nothing(trusted: str) -> None:
    scope = {"type": "http", "client": ("8.8.8.8", 1), "scheme": "http",
             "headers": [(b"x-forwarded-for", b"1.2.3.4"), (b"x-forwarded-proto", b"https")]}
    got = await _seen(lambda app: ClientAddress(app, trusted), scope)
    assert got == ((("8.8.8.8", 1), "http") if trusted != "*" else (("1.2.3.4", 0), "https"))


async def test_a_long_header_is_read_but_not_remembered() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    middleware = ClientAddress(app, "127.0.0.1")
    nothing: Any = None
    long = b"203.0.113." + b"9" * 300 + b", 198.51.100.7"
    await middleware({"type": "http", "client": ("127.0.0.1", 1), "scheme": "http",
                      "headers": [(b"x-forwarded-for", long)]}, nothing, nothing)
    assert middleware._clients == {}  # a client writes the left of it: no pinned memory
