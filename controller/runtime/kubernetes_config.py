"""Which API server, as whom and in which namespace the Kubernetes runtime
works: the controller's --kubeconfig and --kube-namespace, with the
defaults kubectl users expect.

- In a Pod (KUBERNETES_SERVICE_HOST set) and no --kubeconfig: the Pod's
  ServiceAccount (its token, its CA) and, by default, its namespace.
- Else the kubeconfig: --kubeconfig, else the first file $KUBECONFIG names,
  else ~/.kube/config; its current context's namespace by default, else
  "default".

Every failure is a ValueError naming the flag and the file.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path

import yaml

from .kubernetes_api import SERVICE_ACCOUNT, KubeApi


def kubeconfig_path(flag: str | None, environ: Mapping[str, str]) -> Path:
    """The kubeconfig to read: the flag's, $KUBECONFIG's first, ~/.kube/config."""
    chosen = flag or environ.get("KUBECONFIG", "").split(os.pathsep)[0] or "~/.kube/config"
    if chosen.startswith("~/") and environ.get("HOME"):
        return Path(environ["HOME"], chosen[2:])
    return Path(chosen).expanduser()


def connect(kubeconfig: str | None, namespace: str | None,
            environ: Mapping[str, str] | None = None,
            account: Path = SERVICE_ACCOUNT) -> KubeApi:
    """The API client the flags (and the environment) say."""
    environ = os.environ if environ is None else environ
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    if kubeconfig is None and host:
        if not (account / "token").is_file():
            raise ValueError(f"--kubeconfig: this is a Pod (KUBERNETES_SERVICE_HOST is set) "
                             f"without a ServiceAccount token in {account}; give --kubeconfig "
                             "PATH, or mount the ServiceAccount's token")
        port = environ.get("KUBERNETES_SERVICE_PORT", "443")
        try:
            return KubeApi.in_cluster(host, int(port), namespace, account)
        except (OSError, ssl.SSLError, ValueError) as e:
            raise ValueError(f"--kubeconfig: the Pod's ServiceAccount in {account}: "
                             f"{e}") from None
    path = kubeconfig_path(kubeconfig, environ)
    where = "--kubeconfig" if kubeconfig else (
        "$KUBECONFIG" if environ.get("KUBECONFIG") else "--kubeconfig (default ~/.kube/config)")
    if not path.is_file():
        raise ValueError(f"{where} {path}: no such file (the Kubernetes runtime needs a "
                         "kubeconfig, or to run in a Pod with a ServiceAccount)")
    try:
        return KubeApi.from_kubeconfig(path, namespace)
    except (OSError, ssl.SSLError, yaml.YAMLError, KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where} {path}: {str(e).removeprefix(f'{path}: ')}") from None
