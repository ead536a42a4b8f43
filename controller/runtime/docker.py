"""The Docker runtime: each replica is a container made through the Docker Engine API.

A replica container runs `python -m servefleet.replica` from an image that
holds servefleet (deploy/Dockerfile), with:

- labels carrying its identity (cluster, application, deployment, replica
  id, version) and its addresses, which is how `list` finds a cluster's
  replicas after a failover, whoever started them;
- host networking by default, so that, as with the process runtime, the
  controller picks free loopback ports just before the start and the
  replica binds them; on any other network the replica listens on all
  interfaces of its container and is reached at the container's address;
- the deployment's working directory bind-mounted read-only at the same
  path (user code is found where the spec says), its env vars, and its
  resource limits (num_cpus → NanoCpus, memory_bytes → Memory, num_gpus →
  a GPU device request);
- Docker's restart policy off: the controller decides what to restart;
- an init process (tini) as PID 1, reaping what user code leaves behind.

The replica's settings file is copied into the container before it starts
(settings can exceed what fits in an argument or env var). Stopping sends
SIGTERM, waits, kills, and removes the container. The Docker SDK is
blocking, so every call runs in a thread pool of this runtime's own (a slow
stop never delays a start or a liveness sweep). An engine that cannot be
reached raises Unavailable: retried, and not counted against a deployment.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent.futures
import functools
import io
import json
import logging
import math
import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from servefleet._private.observability.logs import ENV_FORMAT
from servefleet._private.replica_command import MODULE, REPLICA_ENV, ReplicaCommand
from servefleet._private.security.hop_tls import replica_serves_tls
from servefleet._private.security.tls import TlsFiles
from servefleet._private.tracing.sdk import ENV_TRACING

from ..errors import Unavailable
from .base import ReplicaLaunch, RuntimeReplica
from .process import free_port
from .threads import thread_env

T = TypeVar("T")
# Seconds one Engine API call may take before it counts as the engine being down.
DOCKER_TIMEOUT_S = 30

logger = logging.getLogger(__name__)

LABEL = "io.servefleet."
SETTINGS_PATH = "/run/servefleet/settings.json"
TLS_DIR = "/run/servefleet/tls"
DEFAULT_IMAGE = "servefleet:latest"


def _inherited_env() -> dict[str, str]:
    """What a container replica takes from its controller's environment, as
    a process replica does: the log format (servefleet/_private/observability/logs.py) and
    the tracing settings (SERVEFLEET_TRACING and the OTEL_* variables:
    servefleet/_private/tracing/sdk.py)."""
    return {k: v for k, v in os.environ.items()
            if k in (ENV_FORMAT, ENV_TRACING) or k.startswith("OTEL_")}


class RuntimeStartError(Exception):
    """The runtime could not start the replica (a clear reason, no Docker jargon dump)."""


def settings_files(settings: dict[str, Any], tls: TlsFiles | None
                   ) -> list[tuple[str, bytes, int]]:
    """(path, content, mode) of the settings file and, with TLS, the replica's
    certificate files (under TLS_DIR; the settings name them there)."""
    files: list[tuple[str, bytes, int]] = []
    if tls is not None:
        inside = TlsFiles(Path(TLS_DIR, "ca.crt"), Path(TLS_DIR, "replica.crt"),
                          Path(TLS_DIR, "replica.key"))
        settings = {**settings, "tls": inside.as_dict()}
        files += [(str(inside.ca), tls.ca.read_bytes(), 0o644),
                  (str(inside.cert), tls.cert.read_bytes(), 0o644),
                  (str(inside.key), tls.key.read_bytes(), 0o600)]
    files.append((SETTINGS_PATH, json.dumps(settings).encode(), 0o600))  # its token
    return files


def _settings_tar(settings: dict[str, Any], tls: TlsFiles | None) -> bytes:
    """settings_files as a tar, for a container's put_archive."""
    files = settings_files(settings, tls)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data, mode in files:
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mtime, info.mode = len(data), int(time.time()), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class DockerRuntime:
    name = "docker"

    def __init__(self, cluster: str, image: str = DEFAULT_IMAGE, network: str = "host",
                 client: Any = None, host: str = "127.0.0.1",
                 mount_working_dir: bool = True, replica_tls: TlsFiles | None = None,
                 http_tls: str = "auto") -> None:
        self._cluster = cluster
        self._replica_tls = replica_tls
        self._http_tls_policy = http_tls
        # False when user code is baked into the image (the controller itself
        # runs in a container and cannot name host paths): the working dir is
        # then a path inside the image.
        self._mount = mount_working_dir
        self._image = image
        self._network = network
        self._host = host
        self._client = client
        self._pool = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="docker")
        self._cores: int | None = None  # the engine's, asked once

    def _docker(self) -> Any:
        if self._client is None:
            import docker  # the SDK follows DOCKER_HOST, then the CLI context

            self._client = docker.from_env(timeout=DOCKER_TIMEOUT_S)
        return self._client

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking SDK call in the pool; an unreachable engine is Unavailable."""
        import docker.errors
        import requests.exceptions

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args))
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                docker.errors.DockerException) as e:
            if isinstance(e, docker.errors.APIError | RuntimeStartError):
                raise
            raise Unavailable(f"the Docker engine is unreachable: {e}") from None

    @staticmethod
    def _name(cluster: str, replica_id: str) -> str:
        return f"servefleet-{cluster}-{replica_id}"

    # -- start ---------------------------------------------------------------------

    def _threads(self, launch: ReplicaLaunch) -> dict[str, str]:
        """Numeric libraries' threads (threads.py): the engine's cores shared by
        the replicas running on it, unless the deployment says."""
        client = self._docker()
        running = client.containers.list(filters={"label": f"{LABEL}cluster={launch.cluster}",
                                                  "status": "running"}, ignore_removed=True)
        if self._cores is None:
            self._cores = int(client.info().get("NCPU") or os.cpu_count() or 1)
        return thread_env(launch.env, float(launch.resources.get("num_cpus", 0)),
                          self._cores, len(running) + 1)

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        return await self._call(self._start, launch)

    def _start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        import docker.errors
        from docker.types import DeviceRequest

        image = launch.image or self._image
        host_network = self._network == "host"
        bind = self._host if host_network else "0.0.0.0"
        grpc = launch.serves_grpc
        command = ReplicaCommand(
            cluster=launch.cluster, application=launch.application,
            deployment=launch.deployment, replica_id=launch.replica_id,
            version=launch.version, host=bind, config_file=SETTINGS_PATH,
            control_port=free_port(self._host) if host_network else 7400,
            http_port=free_port(self._host) if host_network else 7401,
            metrics_port=free_port(self._host) if host_network else 7402,
            grpc_port=(free_port(self._host) if host_network else 7403) if grpc else 0,
            http_tls=int(replica_serves_tls(self._http_tls_policy, self._replica_tls, bind)))
        labels = {LABEL + k: v for k, v in {
            "cluster": launch.cluster, "application": launch.application,
            "deployment": launch.deployment, "replica-id": launch.replica_id,
            "version": launch.version}.items()}
        resources = launch.resources
        options: dict[str, Any] = {
            "name": self._name(launch.cluster, launch.replica_id),
            "labels": labels, "command": ["python3", "-m", MODULE, *command.argv()],
            "detach": True,
            "environment": {**REPLICA_ENV, **_inherited_env(), **self._threads(launch),
                            **launch.env},
            "network_mode": self._network, "restart_policy": {"Name": "no"},
            "stop_signal": "SIGTERM", "init": True,
        }
        if launch.working_dir:
            if self._mount:
                options["volumes"] = {launch.working_dir: {"bind": launch.working_dir,
                                                           "mode": "ro"}}
            options["working_dir"] = launch.working_dir
        if resources.get("num_cpus"):
            options["nano_cpus"] = int(resources["num_cpus"] * 1e9)
        if resources.get("memory_bytes"):
            options["mem_limit"] = int(resources["memory_bytes"])
        if resources.get("num_gpus"):
            options["device_requests"] = [DeviceRequest(
                count=math.ceil(resources["num_gpus"]), capabilities=[["gpu"]])]
        client = self._docker()
        try:
            container = client.containers.create(image, **options)
        except docker.errors.ImageNotFound:
            raise RuntimeStartError(f"image {image!r} is not on this Docker host: build it "
                                    "(deploy/Dockerfile) or pull it first") from None
        except docker.errors.APIError as e:
            raise RuntimeStartError(f"Docker refused to create the container: "
                                    f"{e.explanation or e}") from None
        try:
            container.put_archive("/", _settings_tar(launch.settings, self._replica_tls))
            container.start()
        except docker.errors.APIError as e:
            container.remove(force=True)
            raise RuntimeStartError(f"Docker could not start the container: "
                                    f"{e.explanation or e}") from None
        address = self._host if host_network else self._container_ip(container)
        logger.info("started replica %s as container %s (%s)", launch.replica_id,
                    container.short_id, image)
        return RuntimeReplica(
            replica_id=launch.replica_id, cluster=launch.cluster,
            application=launch.application, deployment=launch.deployment,
            version=launch.version, handle=container.id,
            control_address=command.address(command.control_port, address),
            http_address=command.address(command.http_port, address),
            http_tls=bool(command.http_tls),
            metrics_address=command.address(command.metrics_port, address),
            grpc_address=command.address(command.grpc_port, address))

    def _container_ip(self, container: Any) -> str:
        container.reload()
        networks = container.attrs["NetworkSettings"]["Networks"]
        ip = networks.get(self._network, {}).get("IPAddress") or next(
            (n.get("IPAddress") for n in networks.values() if n.get("IPAddress")), "")
        if not ip:
            raise RuntimeStartError(f"the container has no address on network {self._network}")
        return ip

    # -- stop ------------------------------------------------------------------------

    async def stop(self, handle: str, timeout_s: float) -> None:
        if handle:
            await self._call(self._stop, handle, timeout_s)

    def _stop(self, handle: str, timeout_s: float) -> None:
        import docker.errors

        try:
            container = self._docker().containers.get(handle)
            # SIGTERM, then SIGKILL after the timeout; then the container goes.
            container.stop(timeout=max(1, round(timeout_s)))
            container.remove(force=True)
        except docker.errors.NotFound:
            pass

    # -- observe ---------------------------------------------------------------------

    def _replica(self, container: Any) -> RuntimeReplica:
        labels = container.labels
        state = container.attrs.get("State", {})
        running = state.get("Running", container.status == "running")
        argv = container.attrs.get("Config", {}).get("Cmd") or []
        command = ReplicaCommand.parse(argv)
        address = self._host if self._network == "host" else (
            self._container_ip(container) if running else "")
        return RuntimeReplica(
            replica_id=labels.get(LABEL + "replica-id", ""),
            cluster=labels.get(LABEL + "cluster", ""),
            application=labels.get(LABEL + "application", ""),
            deployment=labels.get(LABEL + "deployment", ""),
            version=labels.get(LABEL + "version", ""), handle=container.id,
            control_address=command.address(command.control_port, address) if command else "",
            http_address=command.address(command.http_port, address) if command else "",
            http_tls=bool(command and command.http_tls),
            metrics_address=command.address(command.metrics_port, address) if command else "",
            grpc_address=command.address(command.grpc_port, address) if command else "",
            alive=bool(running),
            exit_code=None if running else state.get("ExitCode"))

    async def list(self, cluster: str) -> list[RuntimeReplica]:
        def find() -> list[RuntimeReplica]:
            containers = self._docker().containers.list(
                filters={"label": f"{LABEL}cluster={cluster}", "status": "running"},
                ignore_removed=True)
            return [self._replica(c) for c in containers]

        return await self._call(find)

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        if not handle:
            return None

        def get() -> RuntimeReplica | None:
            import docker.errors

            try:
                return self._look_up(handle)
            except docker.errors.NotFound:
                return None

        return await self._call(get)

    def _look_up(self, handle: str) -> RuntimeReplica:
        """The replica `handle` names (NotFound when it is gone)."""
        return self._replica(self._docker().containers.get(handle))

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        """Remove the cluster's containers that are not running (exited, created,
        dead) and that no replica record in `keep` names."""
        def remove() -> list[str]:
            import docker.errors

            removed = []
            for status in ("exited", "created", "dead"):
                for container in self._docker().containers.list(
                        all=True, ignore_removed=True,
                        filters={"label": f"{LABEL}cluster={cluster}", "status": status}):
                    replica_id = container.labels.get(LABEL + "replica-id", "")
                    if replica_id in keep:
                        continue
                    try:
                        container.remove(force=True)
                        removed.append(replica_id)
                    except docker.errors.APIError:
                        pass  # being removed already
            return removed

        return await self._call(remove)

    def logs(self, replica_id: str, lines: int = 20) -> str:
        import docker.errors

        try:
            container = self._docker().containers.get(self._name(self._cluster, replica_id))
            return container.logs(tail=lines).decode(errors="replace")
        except docker.errors.DockerException:
            return ""

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        """The cursor is the Unix time (seconds) the last read covered."""
        import docker.errors

        now = time.time()
        try:
            container = self._docker().containers.get(self._name(self._cluster, replica_id))
            if not cursor:
                data = container.logs(tail=lines)
            else:
                data = container.logs(since=float(cursor), until=now)
            return data.decode(errors="replace"), str(now)
        except docker.errors.DockerException:
            return "", cursor

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def cleanup(self, replica_id: str) -> None:
        """Remove the container if it is still there (it exited by itself)."""
        import docker.errors

        try:
            self._docker().containers.get(self._name(self._cluster, replica_id)).remove(
                force=True)
        except docker.errors.DockerException:
            pass
