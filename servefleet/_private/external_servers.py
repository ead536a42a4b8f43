"""etcd and Prometheus on loopback, for tests and benchmarks: the servers
servefleet talks to, started from Debian's binaries on free ports with their
data in a temporary directory, and stopped (and their data removed) by `stop`.
servefleet's own processes are in testing.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from servefleet._private.testing import free_port, terminate, wait_tcp


class EtcdServer:
    """One etcd member on 127.0.0.1, started on free ports."""

    def __init__(self, binary: str | None = None, certs: str | Path | None = None) -> None:
        """With `certs` (a `servefleet certs init` directory): TLS with
        DIR/etcd.crt, and clients must present a certificate of DIR/etcd-ca.crt."""
        self.binary = binary or shutil.which("etcd") or "/usr/bin/etcd"
        self.certs = Path(certs) if certs else None
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = tempfile.mkdtemp(prefix="servefleet-etcd-")
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(self.data_dir) / "etcd.log"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def url(self) -> str:
        return f"{'etcds' if self.certs else 'etcd'}://{self.endpoint}"

    def start(self) -> EtcdServer:
        if not os.path.exists(self.binary):
            raise FileNotFoundError(
                f"etcd binary not found at {self.binary}: apt-get install etcd-server")
        client = f"{'https' if self.certs else 'http'}://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        cmd = [
            self.binary, "--name", "test", "--data-dir", str(Path(self.data_dir) / "data"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"test={peer}", "--initial-cluster-state", "new",
            "--log-level", "warn",
        ]
        if self.certs:
            cmd += ["--cert-file", str(self.certs / "etcd.crt"),
                    "--key-file", str(self.certs / "etcd.key"),
                    "--trusted-ca-file", str(self.certs / "etcd-ca.crt"), "--client-cert-auth"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        wait_tcp(self.client_port, 30, self.proc, "etcd")
        return self

    def stop(self) -> None:
        terminate(self.proc, 10)
        shutil.rmtree(self.data_dir, ignore_errors=True)


class PrometheusServer:
    """Debian's prometheus on a free loopback port, scraping every second the
    targets an http_sd URL lists (a controller's /-/metrics-targets)."""

    def __init__(self, sd_url: str, binary: str | None = None) -> None:
        self.binary = binary or shutil.which("prometheus") or "/usr/bin/prometheus"
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="servefleet-prometheus-"))
        (self.dir / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n"
            "  - job_name: servefleet\n"
            f"    http_sd_configs: [{{url: '{sd_url}', refresh_interval: 1s}}]\n")
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PrometheusServer:
        if not os.path.exists(self.binary):
            raise FileNotFoundError(
                f"prometheus not found at {self.binary}: apt-get install prometheus")
        with open(self.dir / "prometheus.log", "wb") as log:
            self.proc = subprocess.Popen(
                [self.binary, f"--config.file={self.dir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={self.dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT)
        wait_tcp(self.port, 30, self.proc, "prometheus")
        return self

    def query(self, promql: str) -> list[dict]:
        """The result vector of an instant query (Prometheus's HTTP API)."""
        import httpx

        reply = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        reply.raise_for_status()
        return reply.json()["data"]["result"]

    def stop(self) -> None:
        terminate(self.proc, 10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def logs(self) -> str:
        path = self.dir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""
