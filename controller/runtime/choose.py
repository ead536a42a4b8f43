"""The runtime `--runtime` names, made from the controller's configuration
(the Docker, Swarm, Kubernetes and sim runtimes are imported only when
chosen: their libraries are optional, or their clients are not needed)."""

from __future__ import annotations

import os

from ..config import ControllerConfig
from .base import Runtime
from .process import ProcessRuntime
from .sandbox import Sandbox


def make_runtime(config: ControllerConfig, sandbox: Sandbox) -> Runtime | None:
    if config.runtime == "none":
        return None
    if config.runtime == "sim":
        from .sim import SimRuntime

        return SimRuntime(config.runtime_dir)
    if config.runtime == "swarm":
        from .swarm import SwarmRuntime

        return SwarmRuntime(config.cluster, config.docker_image,
                            config.docker_network,
                            mount_working_dir=config.docker_code == "mount",
                            replica_tls=config.replica_tls,
                             http_tls=config.replica_http_tls)
    if config.runtime == "kubernetes":
        from .kubernetes import KubernetesRuntime
        from .kubernetes_config import connect
        from .kubernetes_owner import parse_owner

        return KubernetesRuntime(config.cluster,
                                 connect(config.kubeconfig, config.kube_namespace),
                                 config.kube_image, pull_policy=config.kube_pull_policy,
                                 replica_tls=config.replica_tls,
                                 http_tls=config.replica_http_tls,
                                 owner=parse_owner(config.kube_owner)
                                 if config.kube_owner else None)
    if config.runtime == "docker":
        from .docker import DockerRuntime

        return DockerRuntime(config.cluster, config.docker_image,
                             config.docker_network,
                             mount_working_dir=config.docker_code == "mount",
                             replica_tls=config.replica_tls,
                             http_tls=config.replica_http_tls)
    runtime_dir = os.path.expanduser(config.runtime_dir)
    return ProcessRuntime(runtime_dir, config.cluster, host=config.replica_host,
                          replica_tls=config.replica_tls,
                          sandbox=sandbox, http_tls=config.replica_http_tls)
