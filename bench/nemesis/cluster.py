"""The cluster a chaos run or a soak faces: three controllers on a
three-member etcd, two proxies (HTTP and the gRPC ingress), and the
replicas the leader starts, all logging JSON into one work directory.
On loopback, or with `hosts` (hosts.py) each controller and proxy in a
network namespace of its own, the etcd members in "main", and a
controller's replicas in its host, bound to its address (--replica-host).

Processes are named for the history ("controller:c1", "proxy:p2",
"etcd:e3", "replica:chaos/Front/<id>"); a process killed by the nemesis is
started again by `restart` on the same port, so the addresses every other
process knows stay valid.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from nemesis.etcd_members import EtcdCluster
from nemesis.hosts import Hosts
from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port
from servefleet.client import ControllerClient

BENCH = Path(__file__).resolve().parent.parent
CHAOS_APPS = str(BENCH / "apps")
EXAMPLES = str(BENCH.parent / "examples")
CLUSTER = "chaos"
# Short enough that a failover is quick, long enough for a 2-core machine
# under load not to lose the lease by accident.
LEASE_TTL_S = 3.0


def off_target(client: ControllerClient) -> list[str]:
    """The deployments not RUNNING at their target, each with what it has
    ("chaos/Back: {'RUNNING': 1, 'STARTING': 1} of 2"); ["no status: ..."]
    when the controller does not answer, ["no deployments"] when it has none."""
    try:
        status = client.status()
    except Exception as e:
        return [f"no status: {type(e).__name__}: {e}"[:200]]
    deployments = [(app.name, dep) for app in status.applications for dep in app.deployments]
    if not deployments:
        return ["no deployments"]
    return [f"{app}/{dep.name}: {dict(dep.replica_states)} of {dep.target_replicas}"
            for app, dep in deployments
            if dict(dep.replica_states) != ({"RUNNING": dep.target_replicas}
                                            if dep.target_replicas else {})]


def shut_down(client: ControllerClient | None, proxy: ProxyProcess | None,
              controller: ControllerProcess) -> None:
    """Stop a one-controller side (embedded.py, docker_side.py): Shutdown
    through `client` (the controller stops its replicas first), then the
    proxy and the controller's process."""
    with contextlib.suppress(Exception):
        if client is not None:
            client.shutdown()
            client.close()
    if proxy is not None:
        proxy.stop()
    controller.stop()


@dataclass
class ReplicaProcess:
    name: str       # "replica:<app>/<deployment>/<id>"
    pid: int
    deployment: str  # "<app>/<deployment>"


class ChaosCluster:
    def __init__(self, work: Path, runtime: str = "process", controllers: int = 3,
                 proxies: int = 2, hosts: Hosts | None = None) -> None:
        self.work = work
        self.runtime = runtime
        self.hosts = hosts

        def host(name: str) -> str:
            return hosts.address(name) if hosts else "127.0.0.1"

        def wrap(name: str) -> list[str]:
            return hosts.wrap(name) if hosts else []

        self.etcd = EtcdCluster(work, host=host("main"))
        # One log directory (and runtime directory) for all: a new leader finds
        # the replicas another started, and their logs.
        self.metrics_ports = {f"c{i + 1}": free_port() for i in range(controllers)}
        self.controllers = {
            name: ControllerProcess(self.etcd.url, cluster=CLUSTER, lease_ttl=LEASE_TTL_S,
                                    runtime=runtime, log_dir=work, host=host(name),
                                    wrap=wrap(name), extra_args=[
                                        "--metrics-listen", f"{host(name)}:{port}",
                                        "--replica-host", host(name),
                                        # Off loopback a controller runs no code
                                        # from a directory it was not told of.
                                        "--allow-working-dir", CHAOS_APPS,
                                        "--allow-working-dir", EXAMPLES])
            for name, port in self.metrics_ports.items()}
        addresses = [c.address for c in self.controllers.values()]
        self.grpc_ports = {f"p{i + 1}": free_port() for i in range(proxies)}
        self.proxies = {
            name: ProxyProcess(addresses, log_dir=work, host=host(name), wrap=wrap(name),
                               extra_args=["--grpc-listen", f"{host(name)}:{port}"])
            for name, port in self.grpc_ports.items()}

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> ChaosCluster:
        """Start everything; on a failure, stop what did start, then raise."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> ChaosCluster:
        os.environ["SERVEFLEET_LOG_FORMAT"] = "json"  # every process below, replicas too
        self.etcd.start()
        self.etcd.wait_healthy()
        for controller in self.controllers.values():
            controller.start(wait=False)
        for controller in self.controllers.values():
            controller.wait_serving_health(timeout=60)
        for proxy in self.proxies.values():
            proxy.start()
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception), self.client(timeout=20) as client:
            client.shutdown()
        for proxy in self.proxies.values():
            proxy.stop()
        for controller in self.controllers.values():
            controller.stop()
        self.etcd.stop()

    def controller_addresses(self) -> list[str]:
        return [c.address for c in self.controllers.values()]

    def client(self, timeout: float = 10) -> ControllerClient:
        return ControllerClient([c.address for c in self.controllers.values()], timeout=timeout)

    # -- who is who ----------------------------------------------------------

    def alive(self, proc) -> bool:
        return proc.proc is not None and proc.proc.poll() is None

    def leader(self) -> str | None:
        for name, controller in self.controllers.items():
            if self.alive(controller) and _running(controller.proc.pid) and \
                    controller.is_leader():
                return name
        return None

    def standbys(self) -> list[str]:
        leader = self.leader()
        return [n for n, c in self.controllers.items() if n != leader and self.alive(c)]

    def proxy_urls(self) -> dict[str, str]:
        return {name: proxy.url for name, proxy in self.proxies.items()}

    def grpc_targets(self) -> dict[str, str]:
        return {name: f"{proxy.host}:{self.grpc_ports[name]}"
                for name, proxy in self.proxies.items()}

    def replicas(self) -> list[ReplicaProcess]:
        return [r for r, _ in self._replicas()]

    def _replicas(self) -> list[tuple[ReplicaProcess, str]]:
        """The replicas the registry holds whose process is alive (process runtime)."""
        found = []
        with self.client() as client:
            for replica in client.replicas():
                record = replica.record
                pid = int(record.handle.split(":")[0]) if record.handle[:1].isdigit() else 0
                if pid and psutil.pid_exists(pid) and not record.stopping:
                    key = f"{record.application}/{record.deployment}"
                    found.append((ReplicaProcess(f"replica:{key}/{record.replica_id}", pid,
                                                 key), record.metrics_address))
        return found

    def processes(self) -> dict[str, tuple[int, str]]:
        """Every process of the cluster alive now: name -> (pid, its /metrics
        URL or "" for etcd). For the soak's sampler."""
        named = {f"etcd:{m.name}": (m.proc.pid, "") for m in self.etcd.members
                 if m.proc is not None and m.alive()}
        named |= {f"controller:{n}": (c.proc.pid,
                                      f"http://{c.host}:{self.metrics_ports[n]}/metrics")
                  for n, c in self.controllers.items() if c.proc is not None and self.alive(c)}
        named |= {f"proxy:{n}": (p.proc.pid, f"{p.url}/-/metrics")
                  for n, p in self.proxies.items() if p.proc is not None and self.alive(p)}
        with contextlib.suppress(Exception):
            named |= {r.name: (r.pid, f"http://{metrics}/metrics" if metrics else "")
                      for r, metrics in self._replicas()}
        return named

    def leader_log_lines(self) -> list[tuple[str, dict]]:
        """Every JSON line of every controller's log that bears a term."""
        lines = []
        for name, controller in self.controllers.items():
            for raw in controller.logs().splitlines():
                if '"term"' not in raw:
                    continue
                with contextlib.suppress(ValueError):
                    lines.append((name, json.loads(raw)))
        return lines


def _running(pid: int) -> bool:
    """False for a process stopped by SIGSTOP (it cannot answer)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_STOPPED
    except psutil.Error:
        return False
