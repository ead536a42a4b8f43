"""How a process proves who it is and checks who it talks to, over gRPC.

`TlsFiles` names a CA certificate and this process's certificate and key
(all PEM). With them, gRPC servers use mutual TLS: the peer must present a
certificate signed by the same CA, and the organizational unit (OU) in its
subject is its role (see `roles.py`). `Credentials` is the client side: the
TLS files (or none: plain text), an optional bearer token sent as
`authorization` metadata, and the name expected in the server's certificate
when the address does not carry it (replicas: `replica.servefleet`).

Processes find their files from flags (`--cluster-ca`, `--cluster-cert`,
`--cluster-key`), or from `--certs DIR` as written by `servefleet certs init`
(DIR/ca.crt and DIR/<role>.crt, DIR/<role>.key), or from the environment
(SERVEFLEET_CERTS, SERVEFLEET_CLUSTER_CA/_CERT/_KEY, SERVEFLEET_TOKEN).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509

from .bearer import TOKEN_METADATA_KEY, token_problem

ENV_CERTS = "SERVEFLEET_CERTS"
ENV_TOKEN = "SERVEFLEET_TOKEN"
ENV_FILES = {"ca": "SERVEFLEET_CLUSTER_CA", "cert": "SERVEFLEET_CLUSTER_CERT",
             "key": "SERVEFLEET_CLUSTER_KEY"}

ChannelOptions = Sequence[tuple[str, Any]]


class TlsConfigError(ValueError):
    """TLS settings that cannot work, naming the flag or file at fault."""


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    # The files' contents, once `loaded`: a process that gives up the right to
    # read them (a replica dropping its privileges) goes on with these.
    pem: tuple[bytes, bytes, bytes] | None = None

    def loaded(self) -> TlsFiles:
        """These files with their contents read now and kept in memory."""
        return TlsFiles(self.ca, self.cert, self.key, self._read())

    @classmethod
    def from_dir(cls, directory: str | Path, role: str) -> TlsFiles:
        d = Path(directory).expanduser()
        return cls(d / "ca.crt", d / f"{role}.crt", d / f"{role}.key").checked()

    @classmethod
    def from_settings(cls, role: str, certs: str | None = None, ca: str | None = None,
                      cert: str | None = None, key: str | None = None,
                      env: Mapping[str, str] | None = None) -> TlsFiles | None:
        """The files named by flags, else by the environment; None when neither
        names any (plain text). TlsConfigError when only some are given or a
        file cannot be read."""
        env = os.environ if env is None else env
        given = {"ca": ca, "cert": cert, "key": key}
        if certs is None and not any(given.values()):
            certs = env.get(ENV_CERTS) or None
            given = {part: env.get(name) or None for part, name in ENV_FILES.items()}
        if certs is not None:
            base = cls.from_dir(certs, role)
            return cls(Path(given["ca"] or base.ca), Path(given["cert"] or base.cert),
                       Path(given["key"] or base.key)).checked()
        if not any(given.values()):
            return None
        missing = [f"--cluster-{part}" for part, value in given.items() if not value]
        if missing:
            raise TlsConfigError(f"{', '.join(missing)} missing: mutual TLS needs "
                                 "--cluster-ca, --cluster-cert and --cluster-key (or --certs DIR)")
        return cls(Path(str(given["ca"])), Path(str(given["cert"])),
                   Path(str(given["key"]))).checked()

    def checked(self) -> TlsFiles:
        for path in (self.ca, self.cert, self.key):
            if not path.is_file():
                raise TlsConfigError(f"{path}: no such file (TLS settings)")
            if not os.access(path, os.R_OK):
                raise TlsConfigError(f"{path}: not readable (TLS settings)")
        return self

    def _read(self) -> tuple[bytes, bytes, bytes]:
        if self.pem is not None:
            return self.pem
        return self.ca.read_bytes(), self.cert.read_bytes(), self.key.read_bytes()

    def server_credentials(self) -> grpc.ServerCredentials:
        """Mutual TLS: a client must present a certificate of this CA."""
        ca, cert, key = self._read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                           require_client_auth=True)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        ca, cert, key = self._read()
        return grpc.ssl_channel_credentials(ca, key, cert)

    def as_dict(self) -> dict[str, str]:
        return {"ca": str(self.ca), "cert": str(self.cert), "key": str(self.key)}

    @classmethod
    def from_dict(cls, value: Mapping[str, str] | None) -> TlsFiles | None:
        if not value:
            return None
        return cls(Path(value["ca"]), Path(value["cert"]), Path(value["key"]))


@dataclass(frozen=True)
class Credentials:
    """What a client presents: TLS files (None: plain text) and a bearer token."""

    tls: TlsFiles | None = None
    token: str | None = None
    # The name to expect in the server's certificate instead of the address's host.
    server_name: str | None = None

    def __post_init__(self) -> None:
        # gRPC refuses to send such a token with a bare INTERNAL "Invalid metadata".
        problem = token_problem(self.token) if self.token else None
        if problem is not None:
            raise TlsConfigError(f"cannot send this token: {problem}")

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ((TOKEN_METADATA_KEY, f"Bearer {self.token}"),) if self.token else ()

    def _options(self, options: ChannelOptions) -> list[tuple[str, Any]]:
        out = list(options)
        if self.tls is not None and self.server_name:
            out.append(("grpc.ssl_target_name_override", self.server_name))
        return out

    def channel(self, address: str, options: ChannelOptions = ()) -> grpc.Channel:
        if self.tls is None:
            return grpc.insecure_channel(address, options=list(options))
        return grpc.secure_channel(address, self.tls.channel_credentials(),
                                   options=self._options(options))

    def aio_channel(self, address: str, options: ChannelOptions = ()) -> grpc.aio.Channel:
        if self.tls is None:
            return grpc.aio.insecure_channel(address, options=list(options))
        return grpc.aio.secure_channel(address, self.tls.channel_credentials(),
                                       options=self._options(options))

    def with_server_name(self, name: str | None) -> Credentials:
        return Credentials(self.tls, self.token, name)

    @classmethod
    def from_env(cls, role: str = "admin", env: Mapping[str, str] | None = None,
                 addresses: Sequence[str] = ()) -> Credentials:
        """The credentials this process holds for `addresses` (every one of
        them registered by `hold_for`: the embedded cluster's); else this
        process's own when it has them (a replica: `set_process_credentials`);
        else from SERVEFLEET_CERTS (DIR/<role>.crt) or
        SERVEFLEET_CLUSTER_CA/_CERT/_KEY, and SERVEFLEET_TOKEN; plain text
        without a token when none is set."""
        held = {_held.get(a) for a in addresses}
        if addresses and len(held) == 1 and None not in held:
            return held.pop()  # type: ignore[return-value]
        if env is None and _process_credentials is not None:
            return _process_credentials
        env = os.environ if env is None else env
        return cls(TlsFiles.from_settings(role, env=env), env.get(ENV_TOKEN) or None)

    def to_env(self) -> dict[str, str]:
        """The environment that makes `from_env` return these credentials."""
        out = {}
        if self.tls is not None:
            out.update({ENV_FILES[k]: v for k, v in self.tls.as_dict().items()})
        if self.token:
            out[ENV_TOKEN] = self.token
        return out


PLAIN = Credentials()
# Set once by a process that holds credentials in memory only (a replica).
_process_credentials: Credentials | None = None


# Credentials by controller address, held in memory (servefleet.run's own
# cluster: its token is in no file or variable user code could read).
_held: dict[str, Credentials] = {}


def hold_for(addresses: Sequence[str], credentials: Credentials | None) -> None:
    """Clients of `addresses` made in this process without credentials use
    these (None: forget them)."""
    for address in addresses:
        if credentials is None:
            _held.pop(address, None)
        else:
            _held[address] = credentials


def set_process_credentials(credentials: Credentials) -> None:
    """What `Credentials.from_env()` returns in this process from now on: how
    handles in a replica's user code call the controllers as that replica,
    without its key files or token in the environment for the code to read."""
    global _process_credentials
    _process_credentials = credentials


def add_port(server: grpc.Server | grpc.aio.Server, address: str, tls: TlsFiles | None) -> int:
    """Bind `address` with mutual TLS when `tls` is given, else in plain text."""
    if tls is None:
        return server.add_insecure_port(address)
    return server.add_secure_port(address, tls.server_credentials())


# One RDN of an RFC 4514 subject: characters other than "," and "\", or escapes.
_RDN = re.compile(r"((?:[^,\\]|\\.)*)(?:,|$)")


def peer_role(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The OU of the peer's verified certificate, or None without one."""
    subjects = auth_context.get("x509_subject") or ()
    for subject in subjects:
        for rdn in _RDN.findall(subject.decode(errors="replace")):
            if rdn.startswith("OU="):
                return rdn[3:]
    return None


def serial_hex(serial: int) -> str:
    """A certificate's serial number as every check compares it: lowercase
    hex without leading zeros (`openssl x509 -serial` prints the same digits
    in upper case, padded to whole bytes)."""
    return format(serial, "x")


@functools.lru_cache(maxsize=1024)
def _pem_serial(pem: bytes) -> str | None:
    try:
        return serial_hex(x509.load_pem_x509_certificate(pem).serial_number)
    except ValueError:
        return None


def peer_serial(auth_context: Mapping[str, Iterable[bytes]]) -> str | None:
    """The serial number of the peer's verified certificate (`serial_hex`),
    or None without one. Parsed once per certificate: a cluster's callers
    present few distinct ones, and each call asks again."""
    for pem in auth_context.get("x509_pem_cert") or ():
        return _pem_serial(bytes(pem))
    return None
