"""One gRPC call sent as raw HTTP/2 frames (h2), for metadata that gRPC's own
clients refuse to send (a tab, a NUL, non-ASCII bytes in a header value) but
any other HTTP/2 client can."""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.events


def tls_socket(address: str, certs: Path, role: str) -> ssl.SSLSocket:
    """A mutual-TLS connection to `address` presenting certs/<role>.crt, offering h2."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(str(certs / f"{role}.crt"), str(certs / f"{role}.key"))
    context.set_alpn_protocols(["h2"])
    host, _, port = address.rpartition(":")
    return context.wrap_socket(socket.create_connection((host, int(port)), timeout=10),
                               server_hostname=host)


def call(sock: socket.socket, path: str, headers: Sequence[tuple[bytes, bytes]],
         message: bytes = b"") -> tuple[str, str]:
    """(grpc-status, grpc-message percent-decoded) of one call of `path` with one request
    `message` and these extra headers, sent exactly as given."""
    config = h2.config.H2Configuration(client_side=True, header_encoding=None,
                                       validate_outbound_headers=False,
                                       normalize_outbound_headers=False,
                                       validate_inbound_headers=False)
    connection = h2.connection.H2Connection(config)
    connection.initiate_connection()
    stream = connection.get_next_available_stream_id()
    scheme = b"https" if isinstance(sock, ssl.SSLSocket) else b"http"
    connection.send_headers(stream, [
        (b":method", b"POST"), (b":scheme", scheme), (b":path", path.encode()),
        (b":authority", b"localhost"), (b"content-type", b"application/grpc"),
        (b"te", b"trailers"), *headers])
    connection.send_data(stream, b"\x00" + struct.pack(">I", len(message)) + message,
                         end_stream=True)
    got: dict[bytes, bytes] = {}
    try:
        sock.sendall(connection.data_to_send())
        while True:
            data = sock.recv(65536)
            if not data:
                raise ConnectionError(f"closed before the call ended: {got}")
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    got.update(dict(event.headers))
                elif isinstance(event, h2.events.StreamReset):
                    raise ConnectionError(f"stream reset (error {event.error_code})")
                elif isinstance(event, h2.events.StreamEnded):
                    return (got.get(b"grpc-status", b"").decode(),
                            unquote(got.get(b"grpc-message", b"").decode()))
            sock.sendall(connection.data_to_send())
    finally:
        sock.close()


def settings_and_goaway(address: str, path: str, wait_s: float) -> tuple[dict[int, int], bool]:
    """Make one call of `path` on a new plain-text connection, then leave it idle
    for up to `wait_s`: the server's HTTP/2 settings, and whether it sent
    GOAWAY (closing the idle connection) within that time."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=wait_s)
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    stream = connection.get_next_available_stream_id()
    connection.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", path),
                                     (":authority", "localhost"),
                                     ("content-type", "application/grpc"), ("te", "trailers")])
    connection.send_data(stream, b"\x00\x00\x00\x00\x00", end_stream=True)
    settings: dict[int, int] = {}
    try:
        sock.sendall(connection.data_to_send())
        while True:
            try:
                data = sock.recv(65536)
            except TimeoutError:
                return settings, False
            if not data:
                return settings, False
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    settings.update({int(k): v.new_value for k, v in
                                     event.changed_settings.items()})
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return settings, True
            sock.sendall(connection.data_to_send())
    finally:
        sock.close()
