"""The Runtime interface: where replicas run (local processes, Docker containers).

A runtime starts a replica from a `ReplicaLaunch`, stops it (SIGTERM, then a
kill after a timeout), lists the replicas of a cluster by their identity
labels, and inspects one. It holds no state a new leader would need: every
replica carries its identity (cluster, application, deployment, replica id,
version) where `list` can read it back, which is how a new leader adopts
replicas it did not start.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class ReplicaLaunch:
    cluster: str
    application: str
    deployment: str
    replica_id: str
    version: str
    # What the replica process loads and its limits (replica/main.py ReplicaSettings).
    settings: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str = ""
    # Docker runtime: the image ("" for the runtime's default) and limits
    # (num_cpus, num_gpus, memory_bytes; 0 means none).
    image: str = ""
    resources: dict[str, float] = field(default_factory=dict)
    # Swarm runtime: node constraints and attributes to spread over (runtime.placement).
    constraints: list[str] = field(default_factory=list)
    spread: list[str] = field(default_factory=list)

    @property
    def serves_grpc(self) -> bool:
        """The replica serves the user's gRPC services (it gets a gRPC port)."""
        return bool(self.settings.get("grpc_servicer_functions"))


@dataclass
class RuntimeReplica:
    """A replica as the runtime sees it."""

    replica_id: str
    cluster: str
    application: str
    deployment: str
    version: str
    handle: str
    control_address: str
    http_address: str
    alive: bool = True
    # host:port of the replica's /metrics ("" when it has none).
    metrics_address: str = ""
    # host:port of the user's gRPC services ("" when it serves none).
    grpc_address: str = ""
    # Its HTTP port serves TLS (servefleet/_private/security/hop_tls.py).
    http_tls: bool = False
    # Known once it exited, when the runtime can tell.
    exit_code: int | None = None


class Runtime(Protocol):
    name: str

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        """Start a replica; returns once it is launched (not once it is ready)."""
        ...

    async def stop(self, handle: str, timeout_s: float) -> None:
        """Ask the replica to exit (SIGTERM); kill it after `timeout_s`. Returns once gone."""
        ...

    async def list(self, cluster: str) -> list[RuntimeReplica]:
        """The live replicas of `cluster`."""
        ...

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        """One replica, dead or alive; None if the runtime knows nothing of it."""
        ...

    def logs(self, replica_id: str, lines: int = 20) -> str:
        """The last lines the replica printed, for status messages."""
        ...

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        """(output, cursor): with an empty cursor the last `lines` lines, else
        what the replica printed since the cursor was returned. Blocking."""
        ...

    def cleanup(self, replica_id: str) -> None:
        """Forget what a stopped replica left behind (settings, logs)."""
        ...

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        """Remove what dead replicas of `cluster` left behind (an exited container),
        except those of the replica ids in `keep`; returns the ids removed."""
        ...

    def close(self) -> None:
        """Release what the runtime holds (a client, a helper process); the
        replicas keep running, for the next leader to adopt."""
        ...
