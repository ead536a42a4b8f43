"""A three-member etcd cluster (on loopback, or a host's address) whose members the nemesis can
kill, stop, and start again with their data (a member that comes back
rejoins with what it had, as after a crash or a host reboot)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx

from servefleet._private.testing import free_port, wait_tcp

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


class EtcdMember:
    def __init__(self, name: str, work: Path, host: str = "127.0.0.1") -> None:
        self.name, self.host = name, host
        self.client_port, self.peer_port = free_port(), free_port()
        self.data_dir = work / f"etcd-{name}"
        self.log_path = work / f"etcd-{name}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    def launch(self, initial_cluster: str) -> None:
        """Start the member; with data from an earlier start it rejoins with
        that data (etcd ignores the initial-cluster flags then)."""
        client = f"http://{self.endpoint}"
        cmd = [ETCD, "--name", self.name, "--data-dir", str(self.data_dir),
               "--listen-client-urls", client, "--advertise-client-urls", client,
               "--listen-peer-urls", self.peer_url,
               "--initial-advertise-peer-urls", self.peer_url,
               "--initial-cluster", initial_cluster, "--initial-cluster-state", "new",
               "--initial-cluster-token", "servefleet-chaos", "--log-level", "warn"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()

    def terminate(self, timeout: float = 10) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class EtcdCluster:
    def __init__(self, work: Path, size: int = 3, host: str = "127.0.0.1") -> None:
        self.members = [EtcdMember(f"e{i + 1}", work, host) for i in range(size)]
        self.initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def url(self) -> str:
        return "etcd://" + ",".join(m.endpoint for m in self.members)

    def member(self, name: str) -> EtcdMember:
        return next(m for m in self.members if m.name == name)

    def start(self, timeout: float = 30) -> EtcdCluster:
        for member in self.members:
            member.launch(self.initial)
        for member in self.members:
            assert member.proc is not None
            wait_tcp(member.client_port, timeout, member.proc, f"etcd {member.name}",
                      member.host)
        return self

    def start_member(self, member: EtcdMember, timeout: float = 30) -> None:
        """Start a member that is down again, with its data; wait until it listens."""
        member.launch(self.initial)
        assert member.proc is not None
        wait_tcp(member.client_port, timeout, member.proc, f"etcd {member.name}",
                      member.host)

    def healthy(self) -> bool:
        """Whether every member answers its /health as part of a cluster with a leader."""
        for member in self.members:
            try:
                reply = httpx.get(f"http://{member.endpoint}/health", timeout=2)
            except httpx.HTTPError:
                return False
            if reply.status_code != 200 or reply.json().get("health") != "true":
                return False
        return True

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(m.alive() for m in self.members) and self.healthy():
                return
            time.sleep(0.2)
        raise TimeoutError(f"etcd not healthy within {timeout}s")

    def stop(self) -> None:
        for member in self.members:
            member.terminate()
