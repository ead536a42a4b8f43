"""A credential that cannot be read is refused whatever else the caller
presents (issue 52): a real controller with mutual TLS, tokens and its HTTP
face, called with a valid client certificate and an authorization that is
not `Bearer TOKEN` (sent as raw HTTP/2 frames or HTTP/1.1 bytes, since
gRPC's and httpx's own clients refuse to send most of them)."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from raw_grpc import call, tls_socket

from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.testing import ControllerProcess, free_port, wait_for

pytestmark = pytest.mark.slow
LIST = "/servefleet.v1.ControllerService/ListDeployments"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    tmp = tmp_path_factory.mktemp("unreadable")
    certs = tmp / "certs"
    init_certs(certs)
    reader = tokens.create(tmp / "tokens", "reader-1", "reader")
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster="unreadable",
                                   runtime="none", log_dir=tmp, certs=certs,
                                   extra_args=["--auth-tokens", str(tmp / "tokens"),
                                               "--metrics-listen", http]).start()
    try:
        # A standby answers UNAVAILABLE: the tests below are about the leader's answers.
        wait_for(controller.is_leader, 30, "the controller to lead")
        yield controller, certs, reader, http
    finally:
        controller.stop()


def test_a_valid_certificate_alone_or_with_a_valid_token_is_served(secured) -> None:
    controller, certs, reader, _ = secured
    for headers in ([], [(b"authorization", b"Bearer " + reader.encode())],
                    [(b"authorization", b"bearer   " + reader.encode())]):
        assert call(tls_socket(controller.address, certs, "admin"), LIST, headers)[0] == "0"


@pytest.mark.parametrize("headers, why", [
    # Each of these was served with the admin certificate's or the token's role.
    ([(b"authorization-bin", b"AAE=")], "binary authorization metadata"),
    ([(b"authorization", b"Bearer TOKEN"), (b"authorization", b"Bearer junk")],
     "2 authorization values"),
    ([(b"authorization", b"Bearer TOKEN\t")], "a tab at character 55"),
    # These were refused, as an unknown token: now the reason is named.
    ([(b"authorization", b"Bearer\tTOKEN")], "a tab at character 7"),
    ([(b"authorization", b"Bearer TOKEN\x00")], "a NUL at character 55"),
    ([(b"authorization", "Bearer TOKENé".encode())], "U+00E9 at character 55"),
    ([(b"authorization", b"Bearer \xff")], "U+00FF at character 8"),  # gRPC reads it as Latin-1
    ([(b"authorization", b"Basic TOKEN")], "not a Bearer credential (scheme 'Basic')"),
    ([(b"authorization", b"Bearer ")], "the token is empty"),
    ([(b"authorization", b"Bearer TOK*EN")], "characters a bearer token cannot have"),
])
def test_an_unreadable_credential_is_refused_beside_a_valid_certificate(
        secured, headers: list[tuple[bytes, bytes]], why: str) -> None:
    controller, certs, reader, _ = secured
    assert len(reader) == 47  # "Bearer " and the token: 54 characters
    sent = [(k, v.replace(b"TOKEN", reader.encode())) for k, v in headers]
    status, message = call(tls_socket(controller.address, certs, "admin"), LIST, sent)
    assert status == "16" and message.startswith("unreadable credentials: "), message
    assert why in message, message
    assert reader not in message and reader[4:20] not in message  # never echoed
    # gRPC itself logs a value that is no UTF-8 (its length only: see below); the
    # controller logs only its refusal.
    assert " ERROR servefleet" not in controller.logs()


def test_grpc_logs_no_token_it_could_not_decode(secured) -> None:
    """gRPC's own log line for metadata that is no UTF-8 quoted the raw value
    (with a traceback): a token with one bad byte after it landed in the log."""
    controller, certs, reader, _ = secured
    sent = [(b"authorization", b"Bearer " + reader.encode() + b"\xff")]
    status, _ = call(tls_socket(controller.address, certs, "admin"), LIST, sent)
    assert status == "16"
    wait_for(lambda: "nvalid encoding" in controller.logs(), 10, "gRPC's line")
    logs = controller.logs()
    assert reader not in logs and reader[4:20] not in logs
    assert "Traceback" not in logs.split("nvalid encoding", 1)[1][:400]


def _http(address: str, certs: Path, headers: bytes) -> tuple[int, bytes]:
    """Status and body of GET /api/status over HTTPS with the admin certificate."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))
    host, _, port = address.rpartition(":")
    with context.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                             server_hostname=host) as sock:
        sock.sendall(b"GET /api/status HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n"
                     + headers + b"\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head[9:12]), body


def test_the_http_face_refuses_an_unreadable_authorization_beside_a_certificate(
        secured) -> None:
    _, certs, reader, http = secured
    token = reader.encode()
    assert _http(http, certs, b"")[0] == 200  # the admin certificate alone
    assert _http(http, certs, b"authorization: Bearer " + token + b"\r\n")[0] == 200
    # Served before, with the first header's token.
    status, body = _http(http, certs, b"authorization: Bearer " + token
                         + b"\r\nauthorization: Bearer junk\r\n")
    assert status == 401 and b"unreadable credentials: 2 Authorization headers" in body, body
    for header, why in ((b"Bearer \xc3\xa9", b"byte 0xc3 at byte 8"),
                        (b"Basic " + token, b"not a Bearer credential"),
                        (b"Bearer\t" + token, b"a tab at character 7")):
        status, body = _http(http, certs, b"authorization: " + header + b"\r\n")
        assert status == 401 and b"unreadable credentials" in body and why in body, body
        assert token not in body


@pytest.mark.parametrize("token, why", [("sft_a\tb", "a tab at character 6"),
                                        ("sft_\u00e9", "U+00E9 at character 5")])
def test_the_cli_names_a_token_it_cannot_send(token: str, why: str) -> None:
    """gRPC's client refuses such metadata with a bare INTERNAL 'Invalid metadata'."""
    out = subprocess.run([sys.executable, "-m", "servefleet", "status", "--controller",
                          f"127.0.0.1:{free_port()}", "--token", token],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert f"--token: cannot send this token: the token holds {why}" in out.stderr
    assert "INTERNAL" not in out.stderr and "Traceback" not in out.stderr
