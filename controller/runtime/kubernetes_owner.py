"""What the objects servefleet makes at run time belong to: `--kube-owner
KIND/NAME`, an object of the namespace that an installer owns (the Helm
chart's controllers' Deployment), so that deleting it (`helm uninstall`)
lets Kubernetes' garbage collector delete what hangs below it: the
deployments' ConfigMaps, then their Pods, then the Pods' Secrets; and the
cluster's certificate Secret that `servefleet certs init --kube-secret`
makes.

- `parse_owner` reads the flag (ValueError naming it and what is wrong);
- `read_owner` reads the object's uid from the API server, each time it is
  asked: a uid held from before the object was made again would name an
  owner that is gone, and the collector deletes what names a missing owner;
- `reference` is the ownerReference dependents carry: not a controller
  reference and no blockOwnerDeletion (the owner's controller knows nothing
  of them, and blocking would need update rights on its finalizers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

# The kinds an owner may be, with their API group/version and resource name.
KINDS = {"Deployment": ("apps/v1", "deployments"), "StatefulSet": ("apps/v1", "statefulsets"),
         "DaemonSet": ("apps/v1", "daemonsets"), "ConfigMap": ("v1", "configmaps"),
         "Secret": ("v1", "secrets"), "ServiceAccount": ("v1", "serviceaccounts")}
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class OwnerApi(Protocol):
    """The reads `read_owner` needs (kubernetes_api.KubeApi's)."""

    async def get(self, kind: str, name: str) -> dict[str, Any] | None: ...

    async def get_named(self, api: str, plural: str, name: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class OwnerRef:
    """An owner as the flag names it: kind and name, in the API's namespace."""

    kind: str
    name: str

    @property
    def flag(self) -> str:
        return f"{self.kind}/{self.name}"


def parse_owner(text: str, flag: str = "--kube-owner") -> OwnerRef:
    """KIND/NAME, KIND one of KINDS (as Kubernetes spells it, or in lower case)."""
    kind, sep, name = text.partition("/")
    known = {k.lower(): k for k in KINDS}
    if not sep or kind.lower() not in known:
        raise ValueError(f"{flag} {text!r}: expected KIND/NAME, KIND one of "
                         f"{', '.join(KINDS)} (e.g. Deployment/servefleet-controller)")
    if not _NAME.match(name):
        raise ValueError(f"{flag} {text!r}: {name!r} is not an object's name (lower-case "
                         "letters, digits, '-' and '.')")
    return OwnerRef(known[kind.lower()], name)


def reference(ref: OwnerRef, uid: str) -> dict[str, Any]:
    """The ownerReference naming the owner with this uid."""
    return {"apiVersion": KINDS[ref.kind][0], "kind": ref.kind, "name": ref.name, "uid": uid}


async def read_owner(api: OwnerApi, ref: OwnerRef, namespace: str) -> dict[str, Any]:
    """The ownerReference to the owner as it is now. LookupError naming the
    flag when there is no such object in the namespace."""
    version, plural = KINDS[ref.kind]
    if version == "v1":
        found = await api.get(plural, ref.name)
    else:
        found = await api.get_named(version, plural, ref.name)
    if found is None:
        raise LookupError(f"--kube-owner {ref.flag}: no {ref.kind} {ref.name!r} in the "
                          f"namespace {namespace}")
    return reference(ref, found["metadata"]["uid"])


def owned_by(obj: dict[str, Any], owner: dict[str, Any]) -> bool:
    """Whether `obj` names that owner (by uid) among its ownerReferences."""
    return any(r.get("uid") == owner["uid"]
               for r in (obj.get("metadata") or {}).get("ownerReferences") or [])
