"""servefleet.run / shutdown in a test, as Ray Serve users write them: an
embedded controller and proxy, an application from a module, a handle and
HTTP, and nothing left running afterwards."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import httpx
import pytest

import servefleet
from servefleet.controller.runtime.process import scan

sys.path.insert(0, str(Path(__file__).resolve().parent / "apps"))

import graph_app
import local_app

pytestmark = [pytest.mark.slow, pytest.mark.serial]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and \
        Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_run_calls_and_shutdown_leave_nothing_behind() -> None:
    handle = servefleet.run(local_app.app, name="calc", route_prefix="/calc", http_port=0)
    try:
        local = servefleet._private.local.embedded._cluster
        assert local is not None
        pids = [local.cluster.controller.pid, local.cluster.proxy.pid]
        runtime = local.cluster.runtime_dir
        replicas = [r for r, settings in scan("default") if settings.startswith(runtime)]
        assert len(replicas) == 2  # Front and Doubler
        assert asyncio.run(_call(handle)) == {"double": 10}
        url = servefleet.local_url() + "/calc"
        assert httpx.get(url, params={"x": "4"}, timeout=10).json() == {"double": 8}
        # A second application joins the same embedded servefleet.
        hello = servefleet.run(graph_app.hello, name="hi", route_prefix="/hi")
        assert asyncio.run(_call_plain(hello)) == "hello"
    finally:
        servefleet.shutdown()
    assert not any(_alive(pid) for pid in pids)
    assert not any(_alive(int(r.handle.split(":")[0])) for r in replicas)
    assert not os.path.exists(local.dir)
    with pytest.raises(RuntimeError, match="no embedded servefleet"):
        servefleet.local_url()


async def _call(handle) -> dict:
    return await handle.remote(5)


async def _call_plain(handle) -> str:
    return await handle.remote(None)


def test_only_this_process_may_call_its_embedded_controller() -> None:
    """It listens on loopback, where every local user reaches it, and runs
    code by value: a caller without this process's token is refused."""
    import grpc

    from servefleet.client import ControllerClient, ControllerError, Credentials
    from servefleet.v1 import deployment_pb2

    handle = servefleet.run(graph_app.hello, name="hi", route_prefix="/hi", http_port=0)
    try:
        assert asyncio.run(_call_plain(handle)) == "hello"  # the process's own calls work
        address = servefleet._private.local.embedded.controller_address()
        with ControllerClient(address, timeout=5, credentials=Credentials()) as stranger:
            with pytest.raises(ControllerError) as refused:
                stranger.deploy(deployment_pb2.DeploymentSpec(name="X", import_path="m:X"))
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
        local = servefleet._private.local.embedded._cluster
        assert local is not None and os.stat(local.dir).st_mode & 0o077 == 0
    finally:
        servefleet.shutdown()
