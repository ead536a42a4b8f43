"""`servefleet certs init --kube-secret NAME` (cli/certs_secret.py): the
cluster's certificates, with the roles servefleet reads from their OU, made
once into a Secret (the Helm chart's certs Job), against an API server in
memory; tests/test_k8s_install.py installs the chart with tls.enabled."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from servefleet._private.cli.certs_secret import make_certs_secret
from servefleet.controller.runtime.kubernetes_api import ApiError
from servefleet.controller.runtime.kubernetes_owner import OwnerRef


class Secrets:
    """Secrets and Deployments of one namespace."""

    namespace = "serving"

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}
        self.deployments: dict[str, dict[str, Any]] = {}
        self.race = False  # another run makes the Secret between our get and create

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        assert kind == "secrets"
        return self.secrets.get(name)

    async def get_named(self, api: str, plural: str, name: str) -> dict[str, Any] | None:
        assert (api, plural) == ("apps/v1", "deployments")
        return self.deployments.get(name)

    async def create(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if self.race:
            self.secrets[name] = {"metadata": {"name": name}, "data": {"theirs": ""}}
        if name in self.secrets:
            raise ApiError(409, f'secrets "{name}" already exists')
        self.secrets[name] = obj
        return obj


def _cert(secret: dict[str, Any], name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate(base64.b64decode(secret["data"][name]))


def test_the_secret_holds_certs_inits_files_with_their_roles() -> None:
    api = Secrets()
    assert asyncio.run(make_certs_secret(api, "sf-certs", hosts=[], days=30))  # type: ignore[arg-type]
    secret = api.secrets["sf-certs"]
    assert secret["type"] == "Opaque" and "ownerReferences" not in secret["metadata"]
    for role in ("controller", "proxy", "replica", "admin", "client"):
        assert {f"{role}.crt", f"{role}.key"} <= set(secret["data"])
        cert = _cert(secret, f"{role}.crt")
        assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)[0].value \
            == role
    assert {"ca.crt", "ca.key", "etcd-ca.crt", "etcd.crt", "etcd-client.crt"} <= set(
        secret["data"])
    names = _cert(secret, "controller.crt").extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert "controller.servefleet" in names  # what proxies and replicas expect in a Pod


def test_a_secret_there_is_kept_as_it_is() -> None:
    api = Secrets()
    asyncio.run(make_certs_secret(api, "sf-certs", hosts=[], days=30))  # type: ignore[arg-type]
    first = api.secrets["sf-certs"]
    assert not asyncio.run(make_certs_secret(api, "sf-certs", hosts=[],  # type: ignore[arg-type]
                                             days=30))
    assert api.secrets["sf-certs"] is first
    api.race = True  # made by another run between the get and the create: that one stays
    assert not asyncio.run(make_certs_secret(api, "other", hosts=[],  # type: ignore[arg-type]
                                             days=30))
    assert api.secrets["other"]["data"] == {"theirs": ""}


def test_the_owner_owns_it_and_a_missing_owner_is_named() -> None:
    api = Secrets()
    api.deployments["sf-servefleet-controller"] = {"metadata": {"uid": "d-1"}}
    owner = OwnerRef("Deployment", "sf-servefleet-controller")
    asyncio.run(make_certs_secret(api, "sf-certs", hosts=[], days=30,  # type: ignore[arg-type]
                                  owner=owner))
    assert api.secrets["sf-certs"]["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sf-servefleet-controller",
         "uid": "d-1"}]
    with pytest.raises(LookupError, match=r"--kube-owner Deployment/gone: no Deployment "
                                          r"'gone' in the namespace serving"):
        asyncio.run(make_certs_secret(api, "other", hosts=[], days=30,  # type: ignore[arg-type]
                                      owner=OwnerRef("Deployment", "gone"), owner_wait_s=0))
    assert "other" not in api.secrets
