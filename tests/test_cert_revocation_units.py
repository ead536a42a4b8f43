"""Revoked certificates, the pure parts: serial numbers of real certificates
(through a real gRPC handshake), the deny list's file, and the CLI that adds
to it."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from servefleet._private.lifecycle import start_http_server
from servefleet._private.security.certs import init_certs, role_server_name
from servefleet._private.security.hop_tls import REPLICA_SERVER_NAME, client_context, server_context
from servefleet._private.security.revocation import (
    RevokedCertsError,
    RevokedCertsFile,
    RevokedSerials,
    certificate_serial,
    parse_serial,
    read_file,
    revoke,
)
from servefleet._private.security.revocation_checks import RevokedCertInterceptor
from servefleet._private.security.tls import Credentials, TlsFiles, add_port, peer_serial
from servefleet._private.testing import free_port


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    init_certs(directory)
    return directory


def serial_of(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def test_peer_serial_is_the_callers_certificate_serial_in_lowercase_hex(certs: Path) -> None:
    """What a gRPC server sees of a caller over mutual TLS, as every hop checks it."""
    seen: list[str | None] = []

    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        auth: Any = context.auth_context()  # the sync stubs type it as one value per key
        seen.append(peer_serial(auth))
        return request

    server = grpc.server(ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "t.T", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})])
    port = add_port(server, "127.0.0.1:0", TlsFiles.from_dir(certs, "controller"))
    server.start()
    try:
        for role in ("proxy", "admin"):
            caller = Credentials(TlsFiles.from_dir(certs, role),
                                 server_name=role_server_name("controller"))
            with caller.channel(f"127.0.0.1:{port}") as channel:
                echo_call: Any = channel.unary_unary("/t.T/Echo")
                assert echo_call(b"x", timeout=10) == b"x"
    finally:
        server.stop(None)
    assert seen == [format(serial_of(certs / "proxy.crt"), "x"),
                    format(serial_of(certs / "admin.crt"), "x")]
    assert peer_serial({}) is None


# -- the deny list's file -----------------------------------------------------------


@pytest.mark.parametrize("text", ["serial=0A1B", "0a:1b", "0x0A1B", "A1B", "  a1b  "])
def test_serial_numbers_are_read_in_the_forms_openssl_and_people_write(text: str) -> None:
    assert parse_serial(text) == "a1b"


@pytest.mark.parametrize("text, message", [
    ("", "not a serial number"),
    ("serial=", "not a serial number"),
    ("12g4", "not a serial number"),
    ("ab" * 21, "at most 40 hex digits"),
])
def test_what_is_no_serial_number_is_named(text: str, message: str) -> None:
    with pytest.raises(RevokedCertsError, match=message):
        parse_serial(text)


def test_the_file_lists_serials_with_comments_and_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "revoked.txt"
    path.write_text("# header\n\nserial=0A1B  # a laptop's admin.crt\nFF:01\n")
    assert read_file(path) == {"a1b", "ff01"}
    path.write_text("a1b\nnot-hex # oops\n")
    with pytest.raises(RevokedCertsError, match=f"{path}:2: 'not-hex' is not a serial"):
        read_file(path)
    with pytest.raises(RevokedCertsError, match="No such file"):
        read_file(tmp_path / "missing.txt")


def test_revoke_appends_once_with_a_comment_and_keeps_the_file_readable(certs: Path,
                                                                      tmp_path: Path) -> None:
    path = tmp_path / "revoked.txt"
    serial, subject = certificate_serial(certs / "admin.crt")
    assert serial == format(serial_of(certs / "admin.crt"), "x") and "OU=admin" in subject
    assert revoke(path, serial, note=subject)
    assert not revoke(path, serial.upper())  # listed already: nothing written
    assert revoke(path, "serial=00FF")
    assert read_file(path) == {serial, "ff"}
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#") and "OU=admin" in lines[1] and len(lines) == 3
    # Serial numbers are no secret; processes of other users read the file.
    assert path.stat().st_mode & 0o777 == 0o644
    with pytest.raises(RevokedCertsError, match="not a PEM certificate"):
        certificate_serial(certs / "admin.key")


def test_a_reload_that_does_not_parse_keeps_the_list_and_listeners_hear_additions(
        tmp_path: Path) -> None:
    path = tmp_path / "revoked.txt"
    path.write_text("0a\n")
    heard: list[frozenset[str]] = []
    listed = RevokedCertsFile(path)
    listed.serials.on_change(heard.append)
    assert "a" in listed.serials and listed.serials.generation == 1
    path.write_text("0a\n0b\n")
    listed.reload()
    assert heard == [frozenset({"b"})] and listed.serials.generation == 2
    path.write_text("0a\nzz\n")
    listed.reload()
    assert listed.serials.serials == {"a", "b"}
    listed.reload()  # nothing changed: no generation, no listener call
    assert listed.serials.generation == 2 and len(heard) == 1
    with pytest.raises(RevokedCertsError, match=":2:"):
        RevokedCertsFile(path)
    assert len(RevokedCertsFile(None).serials) == 0


# -- the checks, on real servers ----------------------------------------------------


def serial_hex_of(certs: Path, role: str) -> str:
    return format(serial_of(certs / f"{role}.crt"), "x")


async def ticks(scope: dict, receive: Any, send: Any) -> None:
    """An ASGI app streaming a line every 50 ms for 20 s, or until its client is gone."""
    await receive()  # the request
    gone = asyncio.ensure_future(receive())  # the next message: http.disconnect
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for n in range(400):
        if gone.done():
            return
        await send({"type": "http.response.body", "body": b"tick %d\n" % n, "more_body": True})
        await asyncio.sleep(0.05)
    await send({"type": "http.response.body", "body": b""})


async def get(port: int, certs: Path, role: str) -> tuple[asyncio.StreamReader,
                                                          asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_context(TlsFiles.from_dir(certs, role)),
        server_hostname=REPLICA_SERVER_NAME)
    writer.write(b"GET /ticks HTTP/1.1\r\nhost: replica\r\n\r\n")
    return reader, writer


async def test_a_tls_server_refuses_a_revoked_certificate_and_ends_its_streams(
        certs: Path) -> None:
    """The replica's HTTP port's context (hop_tls.server_context): refused after
    the handshake, and a stream open when the list changes ends at its next write."""
    revoked = RevokedSerials({serial_hex_of(certs, "admin")})
    port = free_port()
    server = await start_http_server(ticks, "127.0.0.1", port, ssl=server_context(
        TlsFiles.from_dir(certs, "replica"), revoked))
    try:
        reader, writer = await get(port, certs, "admin")
        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        writer.close()

        reader, writer = await get(port, certs, "proxy")
        assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).startswith(
            b"HTTP/1.1 200")
        await asyncio.wait_for(reader.readline(), 10)  # the chunk's size
        assert b"tick 0" in await asyncio.wait_for(reader.readline(), 10)
        revoked.replace({*revoked.serials, serial_hex_of(certs, "proxy")})
        rest = b""
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            rest = await asyncio.wait_for(reader.read(), 10)  # until the server closes
        assert b"tick 399" not in rest and rest.count(b"tick") < 10
        writer.close()
    finally:
        server.force_exit = True
        await server.shutdown()


async def test_a_grpc_server_refuses_a_revoked_certificate_and_ends_its_calls(
        certs: Path) -> None:
    revoked = RevokedSerials({serial_hex_of(certs, "admin")})

    async def echo(request: bytes, context: Any) -> bytes:
        return request

    async def tick(request: bytes, context: Any) -> AsyncIterator[bytes]:
        for n in range(400):
            yield b"%d" % n
            await asyncio.sleep(0.05)

    server = grpc.aio.server(interceptors=[RevokedCertInterceptor(revoked)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("t.T", {
        "Echo": grpc.unary_unary_rpc_method_handler(echo),
        "Tick": grpc.unary_stream_rpc_method_handler(tick),
        "Chat": grpc.stream_stream_rpc_method_handler(
            lambda requests, context: (r async for r in requests))})])
    port = add_port(server, "127.0.0.1:0", TlsFiles.from_dir(certs, "replica"))
    await server.start()

    def channel(role: str) -> Any:  # untyped: the stubs' callables take no bytes
        return Credentials(TlsFiles.from_dir(certs, role),
                           server_name=REPLICA_SERVER_NAME).aio_channel(f"127.0.0.1:{port}")
    try:
        async with channel("admin") as admin:
            for call in (admin.unary_unary("/t.T/Echo")(b"x", timeout=10),
                         admin.unary_stream("/t.T/Tick")(b"x", timeout=10).read(),
                         admin.stream_stream("/t.T/Chat")(iter([b"x"]), timeout=10).read()):
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await call
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert refused.value.details() == (
                    f"the certificate with serial {serial_hex_of(certs, 'admin')} is revoked")
        async with channel("proxy") as proxy:
            assert await proxy.unary_unary("/t.T/Echo")(b"x", timeout=10) == b"x"
            stream = proxy.unary_stream("/t.T/Tick")(b"x", timeout=30)
            assert await stream.read() == b"0"
            revoked.replace({*revoked.serials, serial_hex_of(certs, "proxy")})
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                while await stream.read() != grpc.aio.EOF:
                    pass
            assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "is revoked" in (ended.value.details() or "")
    finally:
        await server.stop(None)


def test_certs_issue_writes_one_more_certificate_of_a_role(tmp_path: Path, capsys) -> None:
    from servefleet._private.cli.main import main

    init_certs(tmp_path)
    assert main(["certs", "issue", str(tmp_path), "prometheus", "--role", "reader"]) == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "prometheus.crt").read_bytes())
    assert "OU=reader" in cert.subject.rfc4514_string()
    assert (tmp_path / "prometheus.key").stat().st_mode & 0o077 == 0
    assert f"serial {format(cert.serial_number, 'x')}" in capsys.readouterr().out
    for argv, message in ((["prometheus", "--role", "reader"], "the name is taken"),
                          (["admin", "--role", "admin"], "the name is taken"),
                          (["../x", "--role", "admin"], "letters, digits")):
        assert main(["certs", "issue", str(tmp_path), *argv]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    with pytest.raises(SystemExit):  # argparse's own usage error
        main(["certs", "issue", str(tmp_path), "x", "--role", "root"])
    assert "invalid choice" in capsys.readouterr().err
    assert main(["certs", "issue", str(tmp_path / "nowhere"), "x", "--role", "admin"]) == 2
    assert "certs init writes" in capsys.readouterr().err
