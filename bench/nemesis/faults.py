"""The nemesis: carries out a schedule's steps on a live cluster, and
records each fault's window (history.Fault).

    kill       SIGKILL; a controller, proxy or etcd member is started again
               after the step's hold (a replica is the controller's to replace;
               the replicas are the cluster's processes and the Docker side's
               containers, docker_side.py, signalled by their host pid)
    stop       SIGSTOP for the hold, then SIGCONT
    restart    an etcd member stopped cleanly and started again with its data
    quorum     two of the three etcd members killed for the hold, then
               started again with their data
    disk-full  the embedded side's store disk full for the hold (embedded.py)
    partition  the leader cut off from etcd, or a proxy cut off from the
               controllers, for the hold (hosts.py: the target's own network
               namespace drops its packets to and from their ports)
    netem      the leader's link made lossy (and slow, where the kernel has
               netem) for the hold

Partitions and link faults need the cluster's hosts (network namespaces,
as root); without them those steps are skipped, with why.

A step whose role has no process now (no leader during a failover, no
replica) is skipped and said so; the plan itself does not change.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from nemesis.cluster import ChaosCluster, ReplicaProcess
from nemesis.docker_side import DockerSide
from nemesis.embedded import EmbeddedSide
from nemesis.history import Fault
from nemesis.schedule import Step

NEEDS_HOSTS = ("partition", "netem")
LOSS_PERCENT, DELAY_MS = 5, 50


class Nemesis:
    def __init__(self, cluster: ChaosCluster, embedded: EmbeddedSide | None = None,
                 say: Callable[[str], None] = print) -> None:
        self.cluster = cluster
        self.embedded = embedded
        self.docker: DockerSide | None = None
        self.say = say
        self.faults: list[Fault] = []
        self._at = 0.0  # when the current step's signal was sent
        self.skipped: list[str] = []
        # Why partitions cannot be made in this run ("": they can).
        self.no_hosts = "" if cluster.hosts else "the run has no network namespaces"

    def run(self, steps: list[Step], started: float, stopping: Callable[[], bool]) -> None:
        """Each step at its time after `started`, until done or `stopping()`."""
        for step in steps:
            while time.time() < started + step.at:
                if stopping():
                    return
                time.sleep(0.1)
            self.carry_out(step)

    def carry_out(self, step: Step) -> None:
        if step.kind in NEEDS_HOSTS and self.no_hosts:
            self._skip(step, self.no_hosts)
            return
        target = self._target(step)
        if target is None:
            self._skip(step, f"no {step.role} now")
            return
        start = self._at = time.time()
        try:
            note = getattr(self, "_" + step.kind.replace("-", "_"))(target, step.hold)
        except (ProcessLookupError, StopIteration) as e:  # gone since it was chosen
            self._skip(step, f"{target} was gone when the fault came ({type(e).__name__})")
            return
        start = self._at  # when the signal went, not when the step began
        fault = Fault(step.kind, target, start, start if step.kind == "kill" else time.time(),
                      note or "")
        self.faults.append(fault)
        self.say(f"  {time.strftime('%H:%M:%S')} {step.fault}: {target} "
                 f"({time.time() - start:.1f} s){' ' + note if note else ''}")

    def _skip(self, step: Step, why: str) -> None:
        self.skipped.append(f"{step.fault} at {step.at:.0f} s: {why}")
        self.say(f"  {time.strftime('%H:%M:%S')} {step.fault}: skipped ({why})")

    def _target(self, step: Step) -> str | None:
        cluster = self.cluster
        candidates: list[str]
        if step.role == "leader":
            leader = cluster.leader()
            candidates = [f"controller:{leader}"] if leader else []
        elif step.role == "standby":
            candidates = [f"controller:{n}" for n in cluster.standbys()]
        elif step.role == "proxy":
            candidates = [f"proxy:{n}" for n, p in cluster.proxies.items() if cluster.alive(p)]
        elif step.role == "replica":
            candidates = sorted(r.name for r in self._replicas())
        elif step.role == "embedded":
            candidates = ["embedded:store"] if self.embedded is not None else []
        else:  # etcd
            candidates = [f"etcd:{m.name}" for m in cluster.etcd.members if m.alive()]
        return candidates[step.pick % len(candidates)] if candidates else None

    def _replicas(self) -> list[ReplicaProcess]:
        """The replicas running now: the cluster's, and the Docker side's."""
        found = []
        for side in (self.cluster, self.docker):
            if side is not None:
                try:
                    found += side.replicas()
                except Exception:  # no leader to ask now
                    pass
        return found

    # -- each kind: do it, wait the hold, heal it; a note for the log ----------

    def _process(self, target: str):
        role, _, name = target.partition(":")
        if role == "controller":
            return self.cluster.controllers[name]
        if role == "proxy":
            return self.cluster.proxies[name]
        return None

    def _pid(self, target: str) -> int:
        role, _, name = target.partition(":")
        if role == "etcd":
            proc = self.cluster.etcd.member(name).proc
        elif role == "replica":
            return next(r.pid for r in self._replicas() if r.name == target)
        else:
            proc = self._process(target).proc
        assert proc is not None
        return proc.pid

    def _kill(self, target: str, hold: float) -> str:
        role, _, name = target.partition(":")
        if role == "replica":
            pid = self._pid(target)
            self._at = time.time()
            os.kill(pid, signal.SIGKILL)
            return ""
        self._at = time.time()
        if role == "etcd":
            member = self.cluster.etcd.member(name)
            member.kill()
            time.sleep(hold)
            self.cluster.etcd.start_member(member)
            return f"started again after {hold:.1f} s"
        process = self._process(target)
        process.kill() if role == "controller" else process.proc.kill()
        process.proc.wait()
        time.sleep(hold)
        process.start(wait=False) if role == "controller" else process.start()
        return f"started again after {hold:.1f} s"

    def _stop(self, target: str, hold: float) -> str:
        pid = self._pid(target)
        self._at = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(hold)
        finally:
            os.kill(pid, signal.SIGCONT)
        return ""

    def _restart(self, target: str, hold: float) -> str:
        member = self.cluster.etcd.member(target.partition(":")[2])
        member.terminate()
        self.cluster.etcd.start_member(member)
        return "stopped cleanly, started with its data"

    def _quorum(self, target: str, hold: float) -> str:
        etcd = self.cluster.etcd
        first = etcd.member(target.partition(":")[2])
        lost = [first, next(m for m in etcd.members if m is not first)]
        for member in lost:
            member.kill()
        time.sleep(hold)
        for member in lost:
            member.launch(etcd.initial)
        etcd.wait_healthy(60)
        return f"{' and '.join(m.name for m in lost)} down for {hold:.1f} s"

    def _partition(self, target: str, hold: float) -> str:
        hosts, cluster = self.cluster.hosts, self.cluster
        assert hosts is not None
        role, _, name = target.partition(":")
        if role == "controller":
            ports = [p for m in cluster.etcd.members for p in (m.client_port, m.peer_port)]
            what = "etcd"
        else:
            ports = [c.port for c in cluster.controllers.values()]
            what = "the controllers"
        self._at = time.time()
        hosts.cut(name, ports)
        try:
            time.sleep(hold)
        finally:
            hosts.heal(name)
        return f"cut off from {what} for {hold:.1f} s"

    def _netem(self, target: str, hold: float) -> str:
        hosts = self.cluster.hosts
        assert hosts is not None
        name = target.partition(":")[2]
        self._at = time.time()
        try:
            done = hosts.lossy(name, LOSS_PERCENT, DELAY_MS)
            time.sleep(hold)
        finally:
            hosts.heal(name)
        return done

    def _disk_full(self, target: str, hold: float) -> str:
        assert self.embedded is not None
        return self.embedded.fill_for(hold)

    def heal_all(self) -> None:
        """After the run: every process that should be running is, and every
        link is whole (a step cut short)."""
        if self.cluster.hosts is not None:
            for name in [*self.cluster.controllers, *self.cluster.proxies]:
                self.cluster.hosts.heal(name)
        for member in self.cluster.etcd.members:
            if member.alive():
                member.signal(signal.SIGCONT)
            else:
                self.cluster.etcd.start_member(member)
        for process in [*self.cluster.controllers.values(), *self.cluster.proxies.values()]:
            if process.proc is not None and process.proc.poll() is None:
                os.kill(process.proc.pid, signal.SIGCONT)
