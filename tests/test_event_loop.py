"""Replicas run on uvloop (lifecycle.run), and user code may still start
subprocesses from the loop. uvloop forks where asyncio uses vfork, and with
gRPC calls in flight a forked child could die of SIGSEGV in gRPC's fork
handlers before it execs (seen in the controller, which therefore stays on
asyncio), unless gRPC's fork support is off from the process's start
(replica_command.REPLICA_ENV, which every runtime gives its replicas)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from servefleet._private.replica_command import REPLICA_ENV
from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

APPS = str(Path(__file__).parent / "apps")
SPAWN = """
import json, uvloop, spawn_app
print(json.dumps(uvloop.run(spawn_app.spawn_while_streaming(40))))
"""


def test_with_the_replica_environment_uvloop_children_survive_grpc_traffic() -> None:
    """Without GRPC_ENABLE_FORK_SUPPORT=0 about one child in ten, each started
    in a session of its own, died here before it printed."""
    done = subprocess.run([sys.executable, "-c", SPAWN], cwd=APPS, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **REPLICA_ENV})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [0] * 40


@pytest.mark.slow
def test_a_replica_on_uvloop_starts_subprocesses_while_grpc_calls_run(
        sqlite_fleet, tmp_path) -> None:
    """The whole path, for the user: the replica runs on uvloop and its
    handler's subprocesses all run. A replica forked by the zygote did not
    show the crash even without GRPC_ENABLE_FORK_SUPPORT=0 (replicas started
    as new interpreters, as in containers, do): the test above is the one
    that fails without the setting."""
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path)
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy_applications([apb.ApplicationSpec(
            name="spawn", import_path="spawn_app:app", route_prefix="/spawn",
            runtime=dpb.RuntimeOptions(working_dir=APPS))])

        def running() -> bool:
            info = client.application_status("spawn")
            return info is not None and info.status == status_pb2.APPLICATION_STATUS_RUNNING

        wait_for(running, 60, "spawn RUNNING")
        proxy.start()
        try:
            wait_for(lambda: httpx.get(proxy.url + "/spawn", params={"n": 1},
                                       timeout=30).status_code == 200, 30, "the route")
            answer = httpx.get(proxy.url + "/spawn", params={"n": 30}, timeout=60).json()
            assert answer == {"loop": "uvloop", "codes": [0] * 30}
        finally:
            proxy.stop()
            client.shutdown()
