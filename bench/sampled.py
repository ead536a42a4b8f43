"""What the py-spy benchmarks share (bench/flame.py, bench/models_profile.py):
the tools they need, one deployment with one replica behind a proxy on a
controller of its own, and py-spy recording a process.

    with serving(spec, work, allow_dir, ready) as (proxy, replica_pid): ...

The controller (sqlite in `work`) may run code from `allow_dir`; `ready(url)`
returns once the route answers. Everything is stopped after, the
deployment's replica included.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from servefleet._private.testing import ControllerProcess, ProxyProcess, stop_cluster
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d


def py_spy() -> str:
    """py-spy's path; exits saying what to install when it or wrk is missing."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not shutil.which("wrk") or not Path(spy).exists():
        sys.exit("needs wrk (apt-get install wrk) and py-spy (pip install py-spy)")
    return spy


@contextlib.contextmanager
def serving(spec: d.DeploymentSpec, work: str, allow_dir: str,
            ready: Callable[[str], object]) -> Iterator[tuple[ProxyProcess, int]]:
    """`spec` (one replica, a route) served by a proxy: yields the proxy and
    the replica's pid."""
    controller = ControllerProcess(f"sqlite://{work}/state.db", log_dir=work,
                                   extra_args=["--allow-working-dir", allow_dir]).start()
    client = ControllerClient(controller.address, timeout=10)
    proxies: list[ProxyProcess] = []
    try:
        while not controller.is_leader():
            time.sleep(0.05)
        client.deploy(spec)
        proxies.append(ProxyProcess([controller.address], log_dir=work).start())
        ready(proxies[0].url + spec.route_prefix)
        (replica,) = client.replicas()
        yield proxies[0], int(replica.record.handle.split(":")[0])  # "pid:start time"
    finally:
        with contextlib.suppress(Exception):  # the figures are printed; a teardown error is not one
            stop_cluster(controller, client, proxies)


def record(spy: str, pid: int, seconds: int, format: str, output: Path) -> subprocess.Popen:
    """py-spy sampling `pid` at 250 Hz for `seconds`, idle frames left out."""
    return subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", "250",
         "--format", format, "--output", str(output), "--nonblocking"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
