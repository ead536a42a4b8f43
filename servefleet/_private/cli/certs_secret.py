"""`servefleet certs init --kube-secret NAME`: the cluster's certificates
made once and kept in a Kubernetes Secret, as the Helm chart's certs Job
makes them at install (tls.enabled).

Helm's own certificate functions cannot write the organizational unit a
caller's role is read from, so the files are `certs init`'s (a CA, a
certificate per role, etcd's CA and certificates), written to a private
temporary directory and put, file name by file name, in one Opaque Secret
of the namespace (the Pod's, in a Pod; else the kubeconfig context's).
A Secret of that name already there is left as it is, so a second run (a
`helm upgrade`, a Job retried) changes nothing. With an owner (--kube-owner
KIND/NAME), the Secret is owned by that object and deleted with it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
import tempfile
from pathlib import Path
from typing import Any

from servefleet._private.security.certs import init_certs
from servefleet.controller.runtime.kubernetes_api import ApiError, KubeApi
from servefleet.controller.runtime.kubernetes_config import connect
from servefleet.controller.runtime.kubernetes_owner import OwnerRef, parse_owner, read_owner

from .errors import UsageError

# How long the owner may take to appear (Helm makes a release's Deployments
# and Jobs in one go: the Job's Pod may start first).
OWNER_WAIT_S = 60.0


def secret_of(name: str, directory: Path) -> dict[str, Any]:
    """The Secret holding every file of `directory`, by file name."""
    files = {path.name: path.read_bytes() for path in sorted(directory.iterdir())}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "servefleet",
                                                  "app.kubernetes.io/component": "certs"}},
            "data": {k: base64.b64encode(v).decode() for k, v in files.items()}}


async def _owner_reference(api: KubeApi, owner: OwnerRef, wait_s: float) -> dict[str, Any]:
    for _ in range(max(1, int(wait_s))):
        try:
            return await read_owner(api, owner, api.namespace)
        except LookupError:
            await asyncio.sleep(1)
    return await read_owner(api, owner, api.namespace)


async def make_certs_secret(api: KubeApi, name: str, *, hosts: list[str], days: int,
                            owner: OwnerRef | None = None,
                            owner_wait_s: float = OWNER_WAIT_S) -> bool:
    """Make the Secret `name` with new certificates unless it is there.
    True when this call made it. LookupError when the owner is not there
    within `owner_wait_s`; ApiError for what the API server refuses."""
    if await api.get("secrets", name) is not None:
        return False
    with tempfile.TemporaryDirectory(prefix="servefleet-certs-") as work:
        init_certs(work, hosts=hosts, days=days)
        secret = secret_of(name, Path(work))
    if owner is not None:
        secret["metadata"]["ownerReferences"] = [
            await _owner_reference(api, owner, owner_wait_s)]
    try:
        await api.create("secrets", secret)
    except ApiError as e:
        if e.status == 409:  # made meanwhile (another run): that one stays
            return False
        raise
    return True


def cmd_certs_secret(args: argparse.Namespace) -> int:
    """certs init --kube-secret NAME: the files in a Kubernetes Secret (certs_secret.py)."""
    if not args.kube_secret or args.dir is not None or args.force:
        raise UsageError("certs init --kube-secret NAME: a Secret instead of DIR (and without "
                         "--force: a Secret there is kept); --kube-owner goes with it")
    try:
        owner = parse_owner(args.kube_owner) if args.kube_owner else None
        api = connect(None, None)
        made = asyncio.run(make_certs_secret(api, args.kube_secret, hosts=args.host,
                                             days=args.days, owner=owner))
    except (ValueError, LookupError) as e:
        raise UsageError(str(e)) from None
    except (ApiError, OSError) as e:
        print(f"servefleet certs init: the Secret {args.kube_secret}: {e}", file=sys.stderr)
        return 1
    print(f"{'made' if made else 'kept'} the Secret {args.kube_secret} in the namespace "
          f"{api.namespace}" + ("" if made else " (it was there)"))
    return 0
