"""The Docker side of a chaos run: replicas as containers.

A controller with the Docker runtime on an engine of the run's own
(docker_engine.py), its sqlite store in the work directory, one proxy, and
one deployment, docker/Echo at /echo, that the operations loop rolls,
reconfigures and scales like the cluster's served ones. Its containers are
among the nemesis's replica targets (kill: SIGKILL of the container's main
process; stop: SIGSTOP for the hold, then SIGCONT: the same signals as a
process replica gets, through the host's pid of the container); its
traffic is the "docker" kind; its deploys go into the history; after the
run it must converge like the cluster and leave no container behind.

It runs a controller of its own rather than the cluster's Docker runtime
because a controller has one runtime, and the cluster's replicas are
processes bound to their controller's host.
"""

from __future__ import annotations

from pathlib import Path

from nemesis.cluster import CHAOS_APPS, ReplicaProcess, off_target, shut_down
from nemesis.docker_engine import PrivateEngine
from nemesis.history import Op
from nemesis.operations import Operations, final_state
from servefleet._private.testing import ControllerProcess, ProxyProcess
from servefleet.client import ControllerClient

KEY = "docker/Echo"
CLUSTER = "chaos-docker"
LABEL = "io.servefleet.cluster=" + CLUSTER


class DockerSide:
    def __init__(self, work: Path) -> None:
        self.work = work / "docker-side"
        self.work.mkdir(exist_ok=True)
        self.engine = PrivateEngine(work)
        self.controller = ControllerProcess(
            f"sqlite://{self.work}/state.db", cluster=CLUSTER, runtime="docker",
            log_dir=self.work, env={"DOCKER_HOST": self.engine.url},
            extra_args=["--allow-working-dir", CHAOS_APPS])
        self.proxy: ProxyProcess | None = None
        self.client: ControllerClient | None = None
        self.ops: Operations | None = None

    def start(self, seed: int) -> DockerSide:
        """Engine, controller, proxy, and docker/Echo deployed (2 replicas);
        DockerUnavailable when there is no engine to be had."""
        self.engine.start()
        try:
            self.controller.start()
            self.proxy = ProxyProcess([self.controller.address], log_dir=self.work)
            self.proxy.start()
            self.client = ControllerClient([self.controller.address], timeout=15)
            # Containers start slower than processes: a change every 8-15 s.
            self.ops = Operations(self.client, seed + 1, every_s=(8.0, 15.0),
                                  served=(KEY,), churned=())
            self.ops.setup()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return self.proxy.url

    def replicas(self) -> list[ReplicaProcess]:
        """Its replicas whose container runs now, with their host pids."""
        if self.client is None:
            return []
        found = []
        for replica in self.client.replicas():
            record = replica.record
            if record.stopping or not record.handle:
                continue
            pid = self.engine.pid(record.handle)
            if pid:
                found.append(ReplicaProcess(f"replica:{KEY}/{record.replica_id}", pid, KEY))
        return found

    def converged(self) -> bool:
        """docker/Echo RUNNING at its target, and every container has its record."""
        return not self.unconverged()

    def unconverged(self) -> list[str]:
        """What keeps it from having converged: deployments off target, leftovers."""
        if self.client is None:
            return []
        return [f"Docker side: {line}" for line in off_target(self.client) + self.leftovers()]

    def leftovers(self) -> list[str]:
        """Running containers no record names, and records with no running container."""
        assert self.client is not None
        listed = self.engine.docker("ps", "-q", "--no-trunc", "--filter", f"label={LABEL}",
                                    check=False, timeout=30)
        if listed.returncode != 0:
            return [f"docker ps failed: {listed.stderr.strip()[:200]}"]
        running = set(listed.stdout.split())
        records = {r.record.handle: r.record.replica_id for r in self.client.replicas()
                   if not r.record.stopping}
        return ([f"container {c[:12]}: no record" for c in running if c not in records]
                + [f"record of replica {rid}: no container" for handle, rid in records.items()
                   if handle not in running])

    def start_ops(self) -> None:
        if self.ops is not None:
            self.ops.start()

    def recorded_ops(self) -> list[Op]:
        return self.ops.stop() if self.ops else []

    def final_state(self) -> dict[str, str]:
        assert self.client is not None
        return final_state(self.client.list())

    def stop(self) -> list[str]:
        """Stop it all; containers left after the controller's shutdown."""
        shut_down(self.client, self.proxy, self.controller)
        left = []
        if self.engine.proc is not None:
            left = [f"after shutdown: container {c[:12]} of the Docker side is left"
                    for c in self.engine.containers(LABEL)]
        self.engine.stop()
        return left
