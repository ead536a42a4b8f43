"""Revoked certificates, the pure parts: serial numbers of real certificates
(through a real gRPC handshake), the deny list's file, and the CLI that adds
to it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509

from servefleet._private.security.certs import init_certs, role_server_name
from servefleet._private.security.tls import Credentials, TlsFiles, add_port, peer_serial


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
