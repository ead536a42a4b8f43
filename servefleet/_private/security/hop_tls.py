"""TLS on the data plane's hop to a replica's HTTP port (requests, streams,
WebSockets and handle calls).

When the cluster has certificates, a replica may serve its HTTP port with
TLS (`server_context`): it presents the replica certificate and requires a
client certificate of the cluster's CA, any role (proxies, other replicas'
handles, an operator's script with a client certificate). Callers connect
with `client_context`: the cluster's CA only, their own certificate, and the
replica's identity, `replica.servefleet`, as the name the replica's
certificate must carry (the address does not name it; certs.py). Whether a
replica does is the controller's choice (`--replica-tls`: on everywhere, off,
or by default off where the replica listens on loopback only, as the
embedded cluster's replicas do, and on elsewhere), published with each
replica's address, so callers know per replica.

`ssl` loads a certificate chain from files only: a process holding its PEM
in memory (a replica, after it gave up reading its files) goes through a
private temporary file, removed at once.
"""

from __future__ import annotations

import os
import ssl
import tempfile

from ..lifecycle import is_loopback
from .certs import role_server_name
from .revocation import RevokedSerials
from .revocation_checks import refuse_revoked
from .tls import TlsFiles

REPLICA_SERVER_NAME = role_server_name("replica")
# The controller's --replica-tls choices.
POLICIES = ("auto", "on", "off")


def _pem(tls: TlsFiles) -> tuple[bytes, bytes, bytes]:
    if tls.pem is not None:
        return tls.pem
    return tls.ca.read_bytes(), tls.cert.read_bytes(), tls.key.read_bytes()


def _context(tls: TlsFiles, purpose: ssl.Purpose) -> ssl.SSLContext:
    ca, cert, key = _pem(tls)
    context = ssl.create_default_context(purpose, cadata=ca.decode())
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    fd, path = tempfile.mkstemp(prefix="servefleet-tls-")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(cert + b"\n" + key)
        context.load_cert_chain(path)
    finally:
        os.unlink(path)
    return context


def server_context(tls: TlsFiles, revoked: RevokedSerials | None = None,
                   client_cert: ssl.VerifyMode = ssl.CERT_REQUIRED) -> ssl.SSLContext:
    """A replica's HTTP server: its certificate; callers must present one of
    the CA (`client_cert`: or may, as to the controller's HTTP face), and
    none that `revoked` lists (then or later)."""
    context = _context(tls, ssl.Purpose.CLIENT_AUTH)
    context.verify_mode = client_cert
    return refuse_revoked(context, revoked) if revoked is not None else context


def client_context(tls: TlsFiles) -> ssl.SSLContext:
    """A caller of replicas: the CA's certificates only, `REPLICA_SERVER_NAME`
    checked (pass it as server_hostname), this process's certificate shown."""
    return _context(tls, ssl.Purpose.SERVER_AUTH)


def replica_serves_tls(policy: str, tls: TlsFiles | None, host: str) -> bool:
    """The controller's choice for a replica listening on `host`."""
    if tls is None or policy == "off":
        return False
    return policy == "on" or not is_loopback(f"{host}:0")
