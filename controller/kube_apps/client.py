"""The ServeApplications API the controller's flags describe: the Kubernetes
client of --kubeconfig and --kube-namespace (runtime/kubernetes_config.py,
the same as the Kubernetes runtime's), bound to serveapplications.servefleet.io."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from servefleet._private.configuration.crd import GROUP, PLURAL, VERSION

from ..runtime.kubernetes_api import KubeApi
from ..runtime.kubernetes_config import connect

API = f"{GROUP}/{VERSION}"


class ServeApplications:
    """ServeApplications in the client's namespace (cache.ObjectsApi)."""

    def __init__(self, kube: KubeApi) -> None:
        self._kube = kube
        self.namespace = kube.namespace

    @classmethod
    def connect(cls, kubeconfig: str | None, namespace: str | None) -> ServeApplications:
        """ValueError naming the flag and the file when it cannot be made."""
        return cls(connect(kubeconfig, namespace))

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        return await self._kube.list_custom(API, PLURAL)

    def watch(self, resource_version: str) -> AsyncGenerator[dict[str, Any], None]:
        return self._kube.watch_custom(API, PLURAL, resource_version)

    async def write_status(self, obj: dict[str, Any]) -> None:
        await self._kube.replace_custom(API, PLURAL, obj, "status")
