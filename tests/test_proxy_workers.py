"""`servefleet proxy --workers 2`: two proxy processes on one port, one
metrics view, a dead worker started again, and a clean stop."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import httpx
import pytest

from servefleet._private.testing import ProxyProcess, free_port, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def _workers(supervisor: int) -> list[int]:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return sorted(int(pid) for pid in children)


def _served(url: str) -> float:
    text = httpx.get(url + "/-/metrics", timeout=10).text
    return sum(float(value) for labels, value in re.findall(
        r"^servefleet_proxy_requests_total\{([^}]*)\} (\S+)$", text, re.M)
        if 'route="/echo"' in labels and 'code="200"' in labels)


def test_two_workers_share_the_port_and_one_metrics_view(sqlite_fleet, tmp_path) -> None:
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(d.DeploymentSpec(
            name="Echo", import_path="echo_app:Echo", route_prefix="/echo",
            runtime=d.RuntimeOptions(working_dir=APPS),
            replica_config=d.ReplicaConfig(num_replicas=1)))
        proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                             extra_args=["--workers", "2"]).start()
        try:
            assert proxy.proc is not None
            workers = wait_for(lambda: len(_workers(proxy.proc.pid)) == 2
                               and _workers(proxy.proc.pid), 30, "two workers")
            # Both announce themselves: the controller lists two proxies at one address.
            wait_for(lambda: len([p for p in client.status().proxies
                                  if p.address == f"127.0.0.1:{proxy.port}"]) == 2, 30,
                     "two proxies in the status")
            wait_for(lambda: httpx.get(proxy.url + "/echo", timeout=5).status_code == 200, 60,
                     "the route in both workers")
            for _ in range(20):  # until both workers know the route (one each may lag)
                assert httpx.get(proxy.url + "/echo", timeout=5).status_code == 200
            before = _served(proxy.url)
            # A new connection per request: the kernel spreads them over both sockets.
            codes = [httpx.get(proxy.url + "/echo", timeout=5).status_code for _ in range(200)]
            assert codes == [200] * 200
            # Every scrape, whichever worker answers it, counts all 200.
            for _ in range(5):
                assert _served(proxy.url) - before == 200

            # A worker killed: the supervisor starts another; the port keeps answering.
            os.kill(workers[0], signal.SIGKILL)
            wait_for(lambda: len(_workers(proxy.proc.pid)) == 2
                     and workers[0] not in _workers(proxy.proc.pid), 30, "a new worker")
            wait_for(lambda: all(httpx.get(proxy.url + "/echo", timeout=5).status_code == 200
                                 for _ in range(50)), 30, "both workers serving again")
            assert proxy.proc.poll() is None

            # SIGTERM to the supervisor drains and stops every worker.
            survivors = _workers(proxy.proc.pid)
            assert proxy.stop() == 0
            assert not [pid for pid in survivors if Path(f"/proc/{pid}").exists()
                        and "zombie" not in Path(f"/proc/{pid}/status").read_text()]
        finally:
            proxy.stop()
            client.shutdown()


def test_workers_do_not_outlive_a_killed_supervisor(tmp_path) -> None:
    proxy = ProxyProcess([f"127.0.0.1:{free_port()}"], log_dir=tmp_path,
                         extra_args=["--workers", "2"]).start()  # no controller: still listens
    assert proxy.proc is not None
    try:
        workers = wait_for(lambda: len(_workers(proxy.proc.pid)) == 2
                           and _workers(proxy.proc.pid), 30, "two workers")
        proxy.proc.kill()
        proxy.proc.wait(10)
        wait_for(lambda: not [pid for pid in workers if _alive(pid)], 30,
                 "the workers gone with their supervisor")
    finally:
        for pid in _workers(proxy.proc.pid) if proxy.proc.poll() is None else []:
            os.kill(pid, signal.SIGKILL)
        proxy.stop()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def test_workers_that_cannot_listen_make_the_supervisor_fail(tmp_path) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "servefleet", "proxy", "--workers", "2", "--listen",
             f"127.0.0.1:{port}", "--controller", f"127.0.0.1:{free_port()}"],
            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "cannot listen" in result.stderr, result.stderr[-2000:]
