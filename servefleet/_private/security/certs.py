"""`servefleet certs init DIR`: a development CA and one certificate per role.

Every certificate is signed by the CA in `DIR/ca.crt` and names its role
twice: as the subject's organizational unit (OU), which the controller and
replicas read to authorise a caller (see `roles.py`), and as a DNS name
`<role>.servefleet`, which clients may use as the expected server name when
the address does not name the host (the controller does so towards replicas,
which run wherever a runtime placed them). Each certificate also names
localhost, 127.0.0.1, ::1 and any `hosts` given, and serves both as a server
and as a client certificate.

etcd gets a CA of its own (etcd-ca.crt), which signs only its server
certificate and the controllers' client certificate for it (etcd-client):
etcd's client-certificate auth accepts any certificate of the CA it trusts,
and replicas (user code) hold replica.key.

Keys are ECDSA P-256 (cheap handshakes) and written with mode 0600. This is
for development and test clusters: a production cluster should have its
certificates issued by the operator's own CA with the same OUs.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# "client" carries no role of its own: a caller presenting it also sends a
# token (with mutual TLS on, every caller needs some certificate of the CA).
ROLES = ("controller", "proxy", "replica", "admin", "client")
# What `issue_cert` may write besides: the roles of people and monitors
# (roles.py), for a holder that needs no token (Prometheus as a reader).
PEOPLE_ROLES = ("reader", "deployer")
ORGANIZATION = "servefleet"


def role_server_name(role: str) -> str:
    """The DNS name every certificate of `role` carries."""
    return f"{role}.servefleet"


def _name(common_name: str, unit: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def _alt_names(role: str, hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in ["localhost", role_server_name(role), "127.0.0.1", "::1", *hosts]:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return list(dict.fromkeys(names))


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey,
             days: int) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days)))


def _make_ca(out: Path, stem: str, common_name: str,
             days: int) -> tuple[ec.EllipticCurvePrivateKey, x509.Name, list[Path]]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name, "ca")
    cert = (_builder(name, name, key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    paths = [out / f"{stem}.crt", out / f"{stem}.key"]
    _write_cert(paths[0], cert)
    _write_key(paths[1], key)
    return key, name, paths


def _issue(out: Path, stem: str, role: str, hosts: list[str], days: int,
           ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name) -> list[Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(_name(f"servefleet-{stem}", role), ca_name, key.public_key(), days)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(_alt_names(role, hosts)), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = [out / f"{stem}.crt", out / f"{stem}.key"]
    _write_cert(paths[0], cert)
    _write_key(paths[1], key)
    return paths


def init_certs(directory: str | Path, *, hosts: Iterable[str] = (), days: int = 365,
               force: bool = False) -> list[Path]:
    """Write the cluster's CA (ca.crt/ca.key) and <role>.crt/<role>.key for
    every role, and etcd's own CA (etcd-ca.crt) with etcd's server
    certificate (etcd.crt) and the controllers' client certificate for it
    (etcd-client.crt): etcd trusts only that CA, so no certificate handed to
    proxies, replicas or people opens the store. Returns the paths.

    FileExistsError (nothing written) when DIR already holds a ca.crt and
    `force` is not set; ValueError for an empty host name.
    """
    hosts = [h.strip() for h in hosts]
    if any(not h for h in hosts):
        raise ValueError("--host: an empty host name")
    out = Path(directory)
    if (out / "ca.crt").exists() and not force:
        raise FileExistsError(f"{out / 'ca.crt'} exists; pass --force to replace every file")
    out.mkdir(parents=True, exist_ok=True)
    ca_key, ca_name, written = _make_ca(out, "ca", "servefleet development CA", days)
    for role in ROLES:
        written += _issue(out, role, role, hosts, days, ca_key, ca_name)
    etcd_key, etcd_name, paths = _make_ca(out, "etcd-ca", "servefleet etcd CA", days)
    written += paths
    written += _issue(out, "etcd", "etcd", hosts, days, etcd_key, etcd_name)
    written += _issue(out, "etcd-client", "controller", hosts, days, etcd_key, etcd_name)
    return written


def issue_cert(directory: str | Path, name: str, role: str, *, hosts: Iterable[str] = (),
               days: int = 365) -> list[Path]:
    """Write DIR/<name>.crt and .key: another certificate of `role`, signed by
    the CA in DIR (ca.crt, ca.key), for one holder (a person's laptop, one
    proxy's host), so that it can be revoked without the others
    (revocation.py). Returns the paths. ValueError naming the problem: an
    unknown role, a name that is not a plain file stem or is taken (a role's
    own, or an existing file), an empty host; OSError when the CA cannot be read."""
    if role not in ROLES + PEOPLE_ROLES:
        raise ValueError(f"--role {role!r}: one of {', '.join(ROLES + PEOPLE_ROLES)}")
    if (not name or len(name) > 64 or not all(c.isalnum() or c in "-_." for c in name)
            or name.startswith(".")):
        raise ValueError(f"{name[:64]!r}: 1-64 letters, digits, '-', '_' or '.' "
                         "(the files are NAME.crt and NAME.key)")
    out = Path(directory)
    reserved = {"ca", "etcd-ca", "etcd", "etcd-client", *ROLES}
    if name in reserved or (out / f"{name}.crt").exists() or (out / f"{name}.key").exists():
        raise ValueError(f"{out / name}.crt: the name is taken; choose another")
    hosts = [h.strip() for h in hosts]
    if any(not h for h in hosts):
        raise ValueError("--host: an empty host name")
    ca_cert = x509.load_pem_x509_certificate((out / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{out / 'ca.key'}: not the ECDSA key certs init writes")
    return _issue(out, name, role, hosts, days, ca_key, ca_cert.subject)
