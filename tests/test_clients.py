"""The clients in other languages against a real cluster: two controllers on
etcd, the process runtime and a proxy. Each client's own test suite runs the
same scenario (deploy, wait RUNNING, call through the proxy, the leader
SIGKILLed, delete); this starts the cluster and hands it the addresses."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from servefleet._private.gopath import go_workspace
from servefleet._private.testing import ProxyProcess
from servefleet.client import ControllerClient

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _show(out: subprocess.CompletedProcess) -> None:
    """The start of each stream (where a failure is named) and its end."""
    for text in (out.stdout, out.stderr):
        print(text if len(text) <= 6000 else f"{text[:3000]}\n[...]\n{text[-3000:]}")


@pytest.fixture
def cluster_env(etcd_fleet, tmp_path):
    etcd_fleet.start(2, runtime="process", lease_ttl=2.0)
    etcd_fleet.leader()
    proxy = ProxyProcess(etcd_fleet.addresses(), log_dir=tmp_path).start()
    env = {**os.environ,
           "SERVEFLEET_CONTROLLER": ",".join(etcd_fleet.addresses()),
           "SERVEFLEET_TEST_PROXY": proxy.url,
           "SERVEFLEET_TEST_APPS": str(ROOT / "tests" / "apps"),
           "SERVEFLEET_TEST_PIDS": json.dumps({p.address: p.proc.pid
                                               for p in etcd_fleet.started})}
    yield env
    proxy.stop()
    with contextlib.suppress(Exception), ControllerClient(etcd_fleet.addresses(),
                                                          timeout=15) as client:
        client.shutdown()


def test_the_node_client(cluster_env, node_grpc) -> None:
    assert shutil.which("node"), "node is missing: run scripts/setup"
    out = subprocess.run(["node", "--test", "test/"], cwd=ROOT / "clients" / "node",
                         env={**cluster_env, "NODE_PATH": node_grpc}, capture_output=True,
                         text=True, timeout=180)
    _show(out)
    assert out.returncode == 0 and "# pass 1" in out.stdout and "# fail 0" in out.stdout


def test_the_go_client(cluster_env, tmp_path) -> None:
    """GOPATH mode with Debian's Go packages (no module proxy is reachable)."""
    assert shutil.which("go"), "go is missing: run scripts/setup"
    repository, go_env = go_workspace(tmp_path / "gopath")
    out = subprocess.run(["go", "test", "-count=1", "-v",
                          "github.com/servefleet/servefleet/clients/go/servefleet"],
                         cwd=repository, env={**cluster_env, **go_env}, capture_output=True,
                         text=True, timeout=300)
    _show(out)
    assert out.returncode == 0 and "--- PASS: TestDeployCallFailOverDelete" in out.stdout


def test_the_java_client(cluster_env) -> None:
    """Built with Debian's jars by clients/java/build, JUnit 4."""
    assert shutil.which("javac"), "a JDK is missing: run scripts/setup"
    out = subprocess.run([str(ROOT / "clients" / "java" / "build"), "test"], cwd=ROOT,
                         env=cluster_env, capture_output=True, text=True, timeout=600)
    _show(out)
    assert out.returncode == 0 and "OK (3 tests)" in out.stdout
