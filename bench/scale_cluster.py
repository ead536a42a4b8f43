"""One simulated cluster for bench/scale.py: etcd, a sim host, two controllers, load.

The controllers are real (`servefleet controller --runtime sim`, on a real
etcd); the replicas are the sim host's (controller/runtime/sim_host.py);
proxies and handles are bench/scale_load.py processes. Every process is
started here and stopped by `close`, whatever happened.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from servefleet._private.external_servers import EtcdServer
from servefleet._private.testing import ControllerProcess, free_port
from servefleet.controller.runtime.sim import socket_path

HERE = Path(__file__).resolve().parent
SIM_HOST = "servefleet.controller.runtime.sim_host"


def scrape(url: str) -> dict[str, float]:
    """A Prometheus text page as {series: value} (labels kept in the name)."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                values[name] = float(value)
            except ValueError:
                pass
    return values


def total(values: dict[str, float], pattern: str) -> float:
    """The sum of every series whose name (with labels) matches `pattern`."""
    return sum(v for k, v in values.items() if re.fullmatch(pattern, k))


class LoadProcess:
    """One bench/scale_load.py process, asked questions over its stdin."""

    def __init__(self, controllers: list[str], watchers: int, reporters: int,
                 deployments: list[str], name: str, log: Path, replicas: list[str]) -> None:
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "scale_load.py"), "--controllers", ",".join(controllers),
             "--watchers", str(watchers), "--reporters", str(reporters), "--name", name,
             "--deployments", ",".join(deployments), *replicas],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True)

    def send(self, command: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"load generator exited with {self.proc.wait()}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"load generator: {answer['error']}")
        return answer["ok"]

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send({"op": "quit"})
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class SimCluster:
    def __init__(self, *, lease_ttl: float, ready_delay_s: float) -> None:
        self.lease_ttl, self.ready_delay_s = lease_ttl, ready_delay_s
        self.dir = Path(tempfile.mkdtemp(prefix="servefleet-scale-"))
        self.runtime_dir = self.dir / "runtime"
        self.metrics_ports: dict[int, int] = {}
        self.loads: list[LoadProcess] = []
        self.controllers: list[ControllerProcess] = []
        self.etcd: EtcdServer | None = None
        self.sim: subprocess.Popen | None = None

    def start(self) -> None:
        """Start etcd, the sim host and two controllers; `close` stops what started."""
        self.etcd = EtcdServer().start()
        self.runtime_dir.mkdir()
        with open(self.dir / "sim-host.log", "ab") as log:
            self.sim = subprocess.Popen(
                [sys.executable, "-m", SIM_HOST, "--socket", str(socket_path(self.runtime_dir)),
                 "--ready-delay-s", str(self.ready_delay_s)],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not socket_path(self.runtime_dir).exists():
            if self.sim.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"sim host did not start: {self.dir / 'sim-host.log'}")
            time.sleep(0.05)
        for _ in range(2):
            self.controllers.append(self._controller(self.lease_ttl))

    def _controller(self, lease_ttl: float) -> ControllerProcess:
        metrics = free_port()
        proc = ControllerProcess(self.etcd.url, cluster="scale", lease_ttl=lease_ttl,
                                 runtime="sim", log_dir=self.dir,
                                 extra_args=["--metrics-listen", f"127.0.0.1:{metrics}"])
        proc.start()
        self.metrics_ports[proc.port] = metrics
        return proc

    @property
    def addresses(self) -> list[str]:
        return [c.address for c in self.controllers]

    def leader(self, timeout: float = 60) -> ControllerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.controllers:
                if proc.proc is not None and proc.proc.poll() is None and proc.is_leader():
                    return proc
            time.sleep(0.01)
        raise TimeoutError("no leader")

    def controller_metrics(self, proc: ControllerProcess) -> dict[str, float]:
        return scrape(f"http://127.0.0.1:{self.metrics_ports[proc.port]}/metrics")

    def etcd_metrics(self) -> dict[str, float]:
        assert self.etcd is not None
        return scrape(f"http://{self.etcd.endpoint}/metrics")

    def usage(self, proc: ControllerProcess) -> psutil.Process:
        assert proc.proc is not None
        return psutil.Process(proc.proc.pid)

    def sim_process(self) -> psutil.Process:
        assert self.sim is not None
        return psutil.Process(self.sim.pid)

    def sim_ask(self, request: dict[str, Any]) -> Any:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(socket_path(self.runtime_dir)))
            s.sendall(json.dumps(request).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                data += chunk
        answer = json.loads(data)
        if "error" in answer:
            raise RuntimeError(f"sim host: {answer['error']}")
        return answer["ok"]

    def start_load(self, watchers: int, reporters: int, deployments: list[str],
                   processes: int, replica_streams: bool = True) -> None:
        """`processes` load generators share the watchers, the reporters and,
        with `replica_streams`, the simulated replicas' Watch streams."""
        def share(n: int, p: int) -> int:
            return n // processes + (1 if p < n % processes else 0)

        for p in range(processes):
            replicas = ["--sim-socket", str(socket_path(self.runtime_dir)),
                        "--replica-share", f"{p}/{processes}"] if replica_streams else []
            self.loads.append(LoadProcess(self.addresses, share(watchers, p),
                                          share(reporters, p), deployments, f"load{p}",
                                          self.dir / f"load{p}.log", replicas))

    def ask_loads(self, command: dict[str, Any]) -> list[Any]:
        for load in self.loads:
            load.send(command)
        return [load.receive() for load in self.loads]

    def close(self, keep: bool = False) -> None:
        """Stop every process; remove the logs unless `keep` or SERVEFLEET_SCALE_KEEP."""
        for load in self.loads:
            load.close()
        for proc in self.controllers:
            proc.stop()
        if self.sim is not None and self.sim.poll() is None:
            self.sim.terminate()
            try:
                self.sim.wait(10)
            except subprocess.TimeoutExpired:
                self.sim.kill()
                self.sim.wait()
        if self.etcd is not None:
            self.etcd.stop()
        if not keep and not os.environ.get("SERVEFLEET_SCALE_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
