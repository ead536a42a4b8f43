"""Real components on loopback, for tests and benchmarks.

`ControllerProcess` runs `servefleet controller`, `ProxyProcess` `servefleet
proxy` and `ReplicaProcess` one replica (without a controller's runtime) as
child processes; `stop_cluster` takes down what a test started, in order,
whatever state it is in. Each stops what it started, and all bind 127.0.0.1
unless told a host (the chaos suite's network namespaces). etcd and
Prometheus, which servefleet talks to, are in external_servers.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from servefleet._private.replica_command import REPLICA_ENV

if TYPE_CHECKING:
    from servefleet.client import ControllerClient


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def terminate(proc: subprocess.Popen | None, timeout: float) -> int | None:
    """SIGTERM, then SIGKILL after `timeout` seconds; the exit code (None: never started)."""
    if proc is None or proc.poll() is not None:
        return proc.returncode if proc else None
    proc.terminate()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def wait_for(predicate, timeout: float = 60, what: str = ""):
    """Poll `predicate` every 0.1 s until it returns something truthy; return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")


def wait_tcp(port: int, timeout: float, proc: subprocess.Popen, what: str,
              host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not listen on {host}:{port} within {timeout}s")


class ControllerProcess:
    """`servefleet controller` as a child process on a free loopback port."""

    def __init__(self, store_url: str, *, cluster: str = "default", lease_ttl: float = 5.0,
                 runtime: str = "process", log_dir: str | Path | None = None,
                 extra_args: list[str] | None = None,
                 certs: str | Path | None = None, host: str = "127.0.0.1",
                 wrap: list[str] | None = None, env: dict[str, str] | None = None) -> None:
        """With `certs` (a `servefleet certs init` directory) the controller runs
        with `--certs DIR`, and this object's own calls present DIR/admin.crt.
        `host`: the address it listens on; `wrap`: a command it runs under
        (`ip netns exec NS`, bench/nemesis); `env`: set in its environment
        (DOCKER_HOST, say)."""
        from servefleet._private.security.tls import PLAIN, Credentials, TlsFiles

        self.port = free_port()
        self.host, self.wrap = host, wrap or []
        self.store_url = store_url
        self.certs = certs
        self.credentials = Credentials(TlsFiles.from_dir(certs, "admin")) if certs else PLAIN
        self.cluster = cluster
        self.lease_ttl = lease_ttl
        self.extra_args = extra_args or []
        self.runtime = runtime
        self.env = env or {}
        directory = Path(log_dir or tempfile.mkdtemp(prefix="servefleet-ctl-"))
        self.log_path = directory / f"controller-{self.port}.log"
        # Shared by every controller given the same log_dir, so a new leader
        # finds the logs of replicas another one started.
        self.runtime_dir = directory / "runtime"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, wait: bool = True) -> ControllerProcess:
        """Start it and (`wait`) wait until it answers health checks; a first
        start whose free port was taken meanwhile goes again on another."""
        for _ in range(3):
            first, logged = self.proc is None, len(self.logs())
            try:
                return self._start(wait)
            except RuntimeError:
                if not (first and "the address is in use" in self.logs()[logged:]):
                    raise
                self.proc, self.port = None, free_port()
        raise RuntimeError(f"controller: no free port it could bind; {self.logs()[-3000:]}")

    def _start(self, wait: bool) -> ControllerProcess:
        cmd = [*self.wrap, sys.executable, "-m", "servefleet", "controller",
               "--store", self.store_url,
               "--listen", self.address, "--cluster", self.cluster,
               "--lease-ttl", str(self.lease_ttl), "--runtime", self.runtime,
               "--runtime-dir", str(self.runtime_dir), *self.extra_args]
        if self.certs:
            cmd += ["--certs", str(self.certs)]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        if wait:
            try:
                self.wait_serving_health(timeout=30)
            except BaseException:
                self.stop()  # not left running for a later test to trip over
                raise
        return self

    def wait_serving_health(self, timeout: float) -> None:
        """Wait until the process answers the gRPC health service (leader or not)."""
        assert self.proc is not None
        wait_tcp(self.port, timeout, self.proc, "controller", self.host)
        deadline = time.monotonic() + timeout
        with self.credentials.channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:  # another process had the port, say
                    raise RuntimeError(f"controller {self.address} exited with "
                                       f"{self.proc.returncode}:\n{self.logs()[-2000:]}")
                with contextlib.suppress(grpc.RpcError):
                    stub.Check(health_pb2.HealthCheckRequest(),  # type: ignore[attr-defined]
                               timeout=1)
                    return
                time.sleep(0.05)
        raise TimeoutError(f"controller {self.address} not healthy within {timeout}s:\n"
                           f"{self.logs()[-2000:]}")

    def is_leader(self) -> bool:
        """True when this controller reports itself the serving leader."""
        with self.credentials.channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(  # type: ignore[attr-defined]
                    service="servefleet.v1.ControllerService"), timeout=1)
            except grpc.RpcError:
                return False
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait()

    def stop(self, timeout: float = 15) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class ProxyProcess:
    """`servefleet proxy` as a child process on a free loopback port."""

    def __init__(self, controllers: list[str], *, log_dir: str | Path | None = None,
                 extra_args: list[str] | None = None, host: str = "127.0.0.1",
                 wrap: list[str] | None = None) -> None:
        self.port = free_port()
        self.host, self.wrap = host, wrap or []  # as ControllerProcess's
        self.controllers = controllers
        self.extra_args = extra_args or []
        directory = Path(log_dir or tempfile.mkdtemp(prefix="servefleet-proxy-"))
        self.log_path = directory / f"proxy-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ProxyProcess:
        """Start it and wait until it listens; a first start whose free port was
        taken meanwhile goes again on another, other early exits say its log."""
        for _ in range(3):
            first, logged = self.proc is None, len(self.logs())
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [*self.wrap, sys.executable, "-m", "servefleet", "proxy", "--controller",
                     ",".join(self.controllers), "--listen", f"{self.host}:{self.port}",
                     *self.extra_args], stdout=log, stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                wait_tcp(self.port, 30, self.proc, "proxy", self.host)
                return self
            except (RuntimeError, TimeoutError) as e:
                self.stop(1)
                if not (first and "already in use" in self.logs()[logged:]):
                    raise RuntimeError(f"{e}; it wrote: {self.logs()[logged:][-3000:]}") from None
                self.proc, self.port = None, free_port()
        raise RuntimeError(f"proxy: no free port it could bind; {self.logs()[-3000:]}")

    def stop(self, timeout: float = 15) -> int | None:
        return terminate(self.proc, timeout)

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class ReplicaProcess:
    """`python -m servefleet.replica` started directly, with its gRPC control stub."""

    def __init__(self, tmp_path: Path, import_path: str, *, cluster: str = "t",
                 application: str = "a", deployment: str = "d", replica_id: str = "r1",
                 version: str = "v1", **settings: object) -> None:
        config = Path(tmp_path) / f"settings-{replica_id}.json"
        config.write_text(json.dumps({"import_path": import_path, **settings}))
        self._argv = [sys.executable, "-m", "servefleet.replica", "--cluster", cluster,
                      "--application", application, "--deployment", deployment,
                      "--replica-id", replica_id, "--version", version,
                      "--config-file", str(config)]
        self._launch()

    def _launch(self) -> None:
        """Start it on two free ports (again after a bind failure: a free port
        can be taken by another process before the replica binds it)."""
        from servefleet.controller.reconcile.replica_client import CHANNEL_OPTIONS
        from servefleet.v1 import replica_pb2_grpc

        self.control, self.http = free_port(), free_port()
        self.proc = subprocess.Popen(
            [*self._argv, "--control-port", str(self.control), "--http-port", str(self.http)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **REPLICA_ENV})
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.control}",
                                             options=CHANNEL_OPTIONS)
        self.stub = replica_pb2_grpc.ReplicaServiceStub(self.channel)

    def metadata(self, timeout: float = 1.0):
        from servefleet.v1 import replica_pb2

        return self.stub.GetMetadata(replica_pb2.GetMetadataRequest(), timeout=timeout)

    def wait_phase(self, *phases: int, timeout: float = 20):
        from servefleet._private.wire import EXIT_BIND_FAILURE

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                meta = self.metadata()
                if meta.phase in phases:
                    return meta
            except grpc.RpcError:
                pass
            code = self.proc.poll()
            if code == EXIT_BIND_FAILURE:
                self.close()
                self._launch()
            elif code is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"replica never reached {phases}; {self._last_words()}")

    def _last_words(self) -> str:
        if self.proc.poll() is None:
            return "still running"
        output = self.proc.stdout.read() if self.proc.stdout is not None else ""
        return f"exited with {self.proc.returncode}: {output[-2000:]}"

    def close(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def stop_cluster(controller: ControllerProcess, client: ControllerClient | None = None,
                 proxies: Iterable[ProxyProcess] = (), kill_replicas: bool = False) -> None:
    """Take down what a test started, whatever state it is in: the proxies
    (no new requests), the applications (`client.shutdown()`, which stops
    their replicas), the client, the controller. With `kill_replicas`, then
    SIGKILL the process runtime's replicas of the controller's cluster that
    a failed shutdown left running (only for a cluster name of the test's
    own: others' replicas may share a common one). Every step runs even
    when one before it failed; a failure is raised once all have run."""
    with contextlib.ExitStack() as steps:  # the steps run last pushed, first
        if kill_replicas:
            steps.callback(_kill_replicas, controller.cluster)
        steps.callback(controller.stop)
        if client is not None:
            steps.callback(client.close)
            steps.callback(client.shutdown)
        for proxy in reversed(list(proxies)):
            steps.callback(proxy.stop)


def _kill_replicas(cluster: str) -> None:
    from servefleet.controller.runtime.process import scan

    for replica, _ in scan(cluster):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(replica.handle.split(":")[0]), signal.SIGKILL)
