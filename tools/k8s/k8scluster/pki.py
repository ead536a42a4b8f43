"""The cluster's certificates and kubeconfigs, made by scripts/k8s start.

One CA signs everything: the API server's serving certificate, a client
certificate per component (its name and group are who RBAC and the Node
authorizer see), each kubelet's serving certificate (so the API server
checks the kubelets it calls), and the admin's (group system:masters). The
service account tokens are signed with a key pair of their own. Keys are
ECDSA P-256: quick to make, and every component accepts them.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .layout import CONTROL_ADDRESS, KUBERNETES_SERVICE_IP, NODES, PKI

DAYS = 365


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(name: str, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    (PKI / f"{name}.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (PKI / f"{name}.key").chmod(0o600)
    (PKI / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(public).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=DAYS)))


def _leaf(ca_key, ca_cert, name: str, cn: str, org: str | None = None, *,
          server: bool = False, dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> None:
    key = _key()
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (_builder(_name(cn, org), ca_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                            content_commitment=False, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=False,
                                            crl_sign=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False))
    if dns or ips:
        alt: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        alt += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    _write(name, key, builder.sign(ca_key, hashes.SHA256()))


def make_all() -> None:
    """Every key and certificate of a new cluster, into run/pki."""
    PKI.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("servefleet-k8s-ca")
    ca_cert = (_builder(ca_name, ca_name, ca_key.public_key())
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=False,
                                            content_commitment=False, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    _write("ca", ca_key, ca_cert)
    _leaf(ca_key, ca_cert, "apiserver", "kube-apiserver", server=True,
          dns=("kubernetes", "kubernetes.default", "kubernetes.default.svc",
               "kubernetes.default.svc.cluster.local", "localhost"),
          ips=("127.0.0.1", CONTROL_ADDRESS, KUBERNETES_SERVICE_IP))
    _leaf(ca_key, ca_cert, "apiserver-kubelet-client", "kube-apiserver-kubelet-client",
          "system:masters")
    _leaf(ca_key, ca_cert, "admin", "servefleet-admin", "system:masters")
    _leaf(ca_key, ca_cert, "controller-manager", "system:kube-controller-manager")
    _leaf(ca_key, ca_cert, "scheduler", "system:kube-scheduler")
    _leaf(ca_key, ca_cert, "kube-proxy", "system:kube-proxy")
    for node in NODES:
        _leaf(ca_key, ca_cert, f"kubelet-{node.name}", f"system:node:{node.name}",
              "system:nodes")
        _leaf(ca_key, ca_cert, f"kubelet-{node.name}-serving", node.name, server=True,
              dns=(node.name,), ips=(node.address,))
    sa_key = _key()
    (PKI / "sa.key").write_bytes(sa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (PKI / "sa.key").chmod(0o600)
    (PKI / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))


def kubeconfig(path: Path, server: str, user: str) -> Path:
    """A kubeconfig for `user` (a certificate made above) at `server`."""
    path.write_text(f"""\
apiVersion: v1
kind: Config
clusters:
- name: servefleet-k8s
  cluster:
    server: {server}
    certificate-authority: {PKI / 'ca.crt'}
users:
- name: {user}
  user:
    client-certificate: {PKI / f'{user}.crt'}
    client-key: {PKI / f'{user}.key'}
contexts:
- name: servefleet-k8s
  context: {{cluster: servefleet-k8s, user: {user}}}
current-context: servefleet-k8s
""")
    path.chmod(0o600)
    return path
