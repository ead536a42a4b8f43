"""The Swarm runtime: each replica is a Docker Swarm service with one task.

Swarm places the task on a node that satisfies the deployment's
`runtime.placement` constraints and has the resources (`spread`: the
runtime adds a constraint for the least-used value, swarm_spread.py);
servefleet's controller still decides everything else, as with the Docker
runtime (docker.py, whose engine access, labels and image this
shares):

- the service is named `servefleet-<cluster>-<replica id>` and carries the
  identity labels (on the service and its container), which is how `list`
  finds a cluster's replicas after a failover;
- restart condition `none`: Swarm never restarts a replica; one replica per
  service (replicated mode, 1);
- host networking (the default): the task binds the ports the controller
  chose, on the node Swarm picked, whose address (the node's `Status.Addr`)
  is recorded with the replica (a taken port makes the replica exit with
  code 3, which the controller retries like any bind failure);
- an overlay network instead (`--docker-network NAME`, attachable): the task
  binds fixed ports on its own address there, which is recorded; services
  use DNS round robin, not a virtual IP, since nothing reaches a replica by
  its service's name; proxies and controllers must be on that network too;
- the settings file is a Swarm config mounted at SETTINGS_PATH (with TLS,
  the CA and certificate are configs and the key a secret), made before the
  service and removed after it;
- `resources`: num_cpus → a NanoCPUs limit and reservation, memory_bytes →
  a memory limit and reservation, num_gpus → a generic resource `gpu`;
- the working dir is bind-mounted read-only at the same path, so it must
  exist on every node that may run the replica (or be baked into the image:
  --docker-code image).

`start` waits until Swarm has placed the task (or refused it): a task that
no node can take (a constraint nobody meets, resources nobody has) or that
fails to start (an image missing on the node) raises RuntimeStartError with
Swarm's reason, which the deployment's status shows, and the service goes.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import threading
import time
from typing import Any

from servefleet._private.replica_command import MODULE, REPLICA_ENV, ReplicaCommand
from servefleet._private.security.hop_tls import replica_serves_tls

from .base import ReplicaLaunch, RuntimeReplica
from .docker import (
    LABEL,
    SETTINGS_PATH,
    DockerRuntime,
    RuntimeStartError,
    _inherited_env,
    settings_files,
)
from .process import free_port
from .swarm_spread import placed_values, spread_constraints
from .threads import thread_env

logger = logging.getLogger(__name__)
_SPREAD_LOCK = threading.Lock()
# How long `start` waits for Swarm to place the task before calling it unplaceable.
PLACE_TIMEOUT_S = 15.0
_ENDED = ("complete", "failed", "shutdown", "rejected", "orphaned", "remove")


class SwarmRuntime(DockerRuntime):
    name = "swarm"

    # -- start -------------------------------------------------------------------

    def _threads(self, launch: ReplicaLaunch) -> dict[str, str]:
        """Numeric libraries' threads (threads.py). Swarm picks the node after the
        service exists, so the share is the swarm's: the cores of its ready nodes
        divided by the cluster's replicas (this one included), unless the
        deployment says (`runtime.env` OMP_NUM_THREADS, or num_cpus)."""
        client = self._docker()
        cores = sum(int(node.attrs.get("Description", {}).get("Resources", {})
                        .get("NanoCPUs", 0)) // 1_000_000_000
                    for node in client.nodes.list()
                    if node.attrs.get("Status", {}).get("State") == "ready"
                    and node.attrs.get("Spec", {}).get("Availability") == "active")
        services = client.services.list(filters={"label": f"{LABEL}cluster={launch.cluster}"})
        return thread_env(launch.env, float(launch.resources.get("num_cpus", 0)),
                          cores or os.cpu_count() or 1, len(services) + 1)

    def _start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        import docker.errors
        from docker.types import (
            ConfigReference,
            EndpointSpec,
            Mount,
            Resources,
            RestartPolicy,
            SecretReference,
            ServiceMode,
        )

        client = self._docker()
        name = self._name(launch.cluster, launch.replica_id)
        host_network = self._network == "host"

        def port(fixed: int) -> int:
            return free_port(self._host) if host_network else fixed
        command = ReplicaCommand(
            cluster=launch.cluster, application=launch.application,
            deployment=launch.deployment, replica_id=launch.replica_id,
            version=launch.version, host="0.0.0.0", config_file=SETTINGS_PATH,
            control_port=port(7400), http_port=port(7401), metrics_port=port(7402),
            grpc_port=port(7403) if launch.serves_grpc else 0,
            http_tls=int(replica_serves_tls(self._http_tls_policy, self._replica_tls, "0.0.0.0")))
        labels = {LABEL + k: v for k, v in {
            "cluster": launch.cluster, "application": launch.application,
            "deployment": launch.deployment, "replica-id": launch.replica_id,
            "version": launch.version}.items()}
        configs, secrets = [], []
        try:
            for path, data, mode in settings_files(launch.settings, self._replica_tls):
                kind = "secret" if path.endswith(".key") else "config"
                made_name = f"{name}-{path.rsplit('/', 1)[-1].replace('.', '-')}"
                if kind == "secret":
                    secret = client.secrets.create(name=made_name, data=data, labels=labels)
                    secrets.append(SecretReference(secret.id, made_name, filename=path,
                                                   mode=mode))
                else:
                    config = client.configs.create(name=made_name, data=data, labels=labels)
                    configs.append(ConfigReference(config.id, made_name, filename=path,
                                                   mode=mode))
            resources = launch.resources
            nano = int(resources.get("num_cpus", 0) * 1e9) or None
            memory = int(resources.get("memory_bytes", 0)) or None
            gpus = int(resources.get("num_gpus", 0))
            env = {**REPLICA_ENV, **_inherited_env(), **launch.env, **self._threads(launch)}
            # Spread choices one at a time: each counts the services made before it.
            with _SPREAD_LOCK if launch.spread else contextlib.nullcontext():
                options: dict[str, Any] = {
                    "name": name, "labels": labels, "container_labels": labels,
                    "command": ["python3", "-m", MODULE], "args": command.argv(),
                    "env": [f"{k}={v}" for k, v in env.items()],
                    "networks": [self._network], "endpoint_spec": EndpointSpec(mode="dnsrr"),
                    "restart_policy": RestartPolicy(condition="none"),
                    "mode": ServiceMode("replicated", replicas=1),
                    "configs": configs, "secrets": secrets,
                    "stop_grace_period": int(launch.settings.get(
                        "graceful_shutdown_timeout_s", 20) * 1e9) + 2_000_000_000,
                    "resources": Resources(
                        cpu_limit=nano, cpu_reservation=nano, mem_limit=memory,
                        mem_reservation=memory,
                        generic_resources={"gpu": gpus} if gpus else None),
                    "constraints": [*launch.constraints, *self._spread(launch)] or None,
                }
                if launch.working_dir:
                    if self._mount:
                        options["mounts"] = [Mount(launch.working_dir, launch.working_dir,
                                                   type="bind", read_only=True)]
                    options["workdir"] = launch.working_dir
                service = client.services.create(launch.image or self._image, **options)
        except docker.errors.APIError as e:
            self._remove_files(launch.replica_id)
            raise RuntimeStartError(f"Swarm refused the service: {e.explanation or e}") from None
        node = self._placed(service)
        logger.info("started replica %s as service %s at %s", launch.replica_id,
                    service.short_id, node)
        return RuntimeReplica(
            replica_id=launch.replica_id, cluster=launch.cluster,
            application=launch.application, deployment=launch.deployment,
            version=launch.version, handle=service.id,
            control_address=command.address(command.control_port, node),
            http_address=command.address(command.http_port, node),
            http_tls=bool(command.http_tls),
            metrics_address=command.address(command.metrics_port, node),
            grpc_address=command.address(command.grpc_port, node))

    def _spread(self, launch: ReplicaLaunch) -> list[str]:
        """Constraints that spread the deployment's replicas (swarm_spread.py:
        Swarm's own spread works within one service, and each replica is one)."""
        if not launch.spread:
            return []
        client = self._docker()
        mine = [f"{LABEL}{k}={v}" for k, v in (("cluster", launch.cluster),
                                               ("application", launch.application),
                                               ("deployment", launch.deployment))]
        nodes = {node.id: node.attrs for node in client.nodes.list()}
        placed = []
        for service in client.services.list(filters={"label": mine}):
            tasks = service.tasks(filters={"desired-state": "running"})
            node = nodes.get(tasks[0].get("NodeID", "")) if tasks else None
            placement = service.attrs.get("Spec", {}).get("TaskTemplate", {}).get(
                "Placement", {})
            placed.append(placed_values(placement.get("Constraints") or [], node,
                                        launch.spread))
        return spread_constraints(launch.spread, list(launch.constraints),
                                  list(nodes.values()), placed)

    def _placed(self, service: Any) -> str:
        """The replica's address once Swarm placed its task (see _address);
        RuntimeStartError (and the service removed) when it cannot."""
        deadline = time.monotonic() + PLACE_TIMEOUT_S
        while True:
            task = self._task(service) or {}
            status = task.get("Status", {})
            state = status.get("State", "")
            if state in ("starting", "running") and self._address(task):
                return self._address(task)
            if state in _ENDED or time.monotonic() > deadline:
                reason = status.get("Err") or status.get("Message") or state or "no task"
                self._remove(service)
                if state not in _ENDED:
                    reason = f"no node can take it within {PLACE_TIMEOUT_S:g} s: {reason}"
                raise RuntimeStartError(f"Swarm could not run the replica: {reason}")
            time.sleep(0.1)

    def _task(self, service: Any) -> dict[str, Any] | None:
        tasks = service.tasks()
        return max(tasks, key=lambda t: t.get("CreatedAt", "")) if tasks else None

    def _address(self, task: dict[str, Any]) -> str:
        """Where the task's replica answers: its node's address on the host
        network, its own address on an overlay network; "" before it has one."""
        if self._network == "host":
            return self._node_address(task["NodeID"]) if task.get("NodeID") else ""
        for attachment in task.get("NetworksAttachments") or []:
            network = attachment.get("Network", {})
            if self._network in (network.get("ID"), network.get("Spec", {}).get("Name")):
                addresses = attachment.get("Addresses") or [""]
                return addresses[0].split("/")[0]
        return ""

    def _node_address(self, node_id: str) -> str:
        address = self._docker().nodes.get(node_id).attrs.get("Status", {}).get("Addr", "")
        # A single-node swarm advertising 0.0.0.0 reports that: the local host then.
        return self._host if address in ("", "0.0.0.0") else address

    # -- stop ----------------------------------------------------------------------

    def _stop(self, handle: str, timeout_s: float) -> None:
        import docker.errors

        try:
            service = self._docker().services.get(handle)
        except docker.errors.NotFound:
            return
        replica_id = service.attrs["Spec"]["Labels"].get(LABEL + "replica-id", "")
        self._remove(service)
        # Removing the service stops its task (SIGTERM, then SIGKILL after the
        # grace period); wait until its container is gone.
        deadline = time.monotonic() + timeout_s + 5
        while time.monotonic() < deadline and self._docker().containers.list(
                all=True, filters={"label": f"com.docker.swarm.service.id={handle}"}):
            time.sleep(0.1)
        self._remove_files(replica_id)

    def _remove(self, service: Any) -> None:
        import docker.errors

        try:
            service.remove()
        except docker.errors.NotFound:
            pass

    def _remove_files(self, replica_id: str) -> None:
        import docker.errors

        client = self._docker()
        flt = {"label": [f"{LABEL}cluster={self._cluster}", f"{LABEL}replica-id={replica_id}"]}
        for made in [*client.configs.list(filters=flt), *client.secrets.list(filters=flt)]:
            try:
                made.remove()
            except docker.errors.APIError:
                pass  # still in use by a service being removed: prune gets it

    # -- observe ---------------------------------------------------------------------

    def _service_replica(self, service: Any) -> RuntimeReplica:
        labels = service.attrs["Spec"].get("Labels", {})
        spec = service.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]
        command = ReplicaCommand.parse([*spec.get("Command", []), *spec.get("Args", [])])
        task = self._task(service)
        status = (task or {}).get("Status", {})
        # Alive until the task ended: a task still being prepared is no exit.
        running = task is not None and status.get("State") not in _ENDED
        node = self._address(task) if task else ""
        exit_code = status.get("ContainerStatus", {}).get("ExitCode")
        return RuntimeReplica(
            replica_id=labels.get(LABEL + "replica-id", ""),
            cluster=labels.get(LABEL + "cluster", ""),
            application=labels.get(LABEL + "application", ""),
            deployment=labels.get(LABEL + "deployment", ""),
            version=labels.get(LABEL + "version", ""), handle=service.id,
            control_address=command.address(command.control_port, node) if command else "",
            http_address=command.address(command.http_port, node) if command else "",
            http_tls=bool(command and command.http_tls),
            metrics_address=command.address(command.metrics_port, node) if command else "",
            grpc_address=command.address(command.grpc_port, node) if command else "",
            alive=running, exit_code=None if running else exit_code)

    async def list(self, cluster: str) -> builtins.list[RuntimeReplica]:
        def find() -> builtins.list[RuntimeReplica]:
            services = self._docker().services.list(
                filters={"label": f"{LABEL}cluster={cluster}"})
            found = [self._service_replica(s) for s in services]
            return [r for r in found if r.alive]

        return await self._call(find)

    def _look_up(self, handle: str) -> RuntimeReplica:
        return self._service_replica(self._docker().services.get(handle))

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        """Remove the cluster's services whose task ended, unless a record in
        `keep` names them, and their configs and secrets."""
        def remove() -> builtins.list[str]:
            removed = []
            for service in self._docker().services.list(
                    filters={"label": f"{LABEL}cluster={cluster}"}):
                replica = self._service_replica(service)
                if replica.alive or replica.replica_id in keep:
                    continue
                self._remove(service)
                self._remove_files(replica.replica_id)
                removed.append(replica.replica_id)
            return removed

        return await self._call(remove)

    def logs(self, replica_id: str, lines: int = 20) -> str:
        import docker.errors

        try:
            service = self._docker().services.get(self._name(self._cluster, replica_id))
            return b"".join(service.logs(stdout=True, stderr=True, tail=lines)).decode(
                errors="replace")
        except docker.errors.DockerException:
            return ""

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        """The cursor is the Unix time (seconds) the last read covered."""
        import docker.errors

        now = time.time()
        try:
            service = self._docker().services.get(self._name(self._cluster, replica_id))
            chunks = service.logs(stdout=True, stderr=True, tail=lines) if not cursor else \
                service.logs(stdout=True, stderr=True, since=int(float(cursor)))
            return b"".join(chunks).decode(errors="replace"), str(now)
        except docker.errors.DockerException:
            return "", cursor

    def cleanup(self, replica_id: str) -> None:
        self._remove_files(replica_id)
