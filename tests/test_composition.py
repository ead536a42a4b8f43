"""Composition: deployments calling each other through handles, behind a real proxy."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from servefleet import HandleError, get_deployment_handle
from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
FAST = dpb.ReplicaConfig(graceful_shutdown_wait_loop_s=0.1, graceful_shutdown_timeout_s=5,
                         health_check_period_s=0.5)


def calc(scale: int | None = None, **fields) -> apb.ApplicationSpec:
    overrides = [apb.DeploymentOverride(name="Front", replica_config=FAST)]
    adder = dpb.ReplicaConfig()
    adder.CopyFrom(FAST)
    if scale is not None:
        adder.user_config_json = json.dumps({"scale": scale})
    overrides.append(apb.DeploymentOverride(name="Adder", replica_config=adder))
    return apb.ApplicationSpec(name="calc", import_path="graph_app:app", route_prefix="/calc",
                               runtime=dpb.RuntimeOptions(working_dir=APPS),
                               deployments=overrides, **fields)


def running(client: ControllerClient, name: str = "calc") -> bool:
    info = client.application_status(name)
    return info is not None and info.status == status_pb2.APPLICATION_STATUS_RUNNING


@pytest.fixture
def served(sqlite_fleet, tmp_path):
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path)
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy_applications([calc(), apb.ApplicationSpec(
            name="sync", import_path="graph_app:sync_app", route_prefix="/sync",
            runtime=dpb.RuntimeOptions(working_dir=APPS))])
        wait_for(lambda: running(client) and running(client, "sync"), 60, "calc and sync RUNNING")
        proxy.start()
        yield client, proxy, sqlite_fleet.addresses()
        proxy.stop()
        client.shutdown()


def test_a_front_calls_its_adder_through_handles_under_concurrent_load(served) -> None:
    client, proxy, _ = served
    url = proxy.url + "/calc"
    wait_for(lambda: httpx.get(url, params={"x": 1}, timeout=5).status_code == 200, 30,
             "the route at the proxy")
    assert httpx.get(url, params={"x": 1}).json() == {"label": "front", "call": 11,
                                                      "method": 11}

    def ask(x: int) -> tuple[int, dict]:
        reply = httpx.get(url, params={"x": x}, timeout=30)
        return reply.status_code, reply.json() if reply.status_code == 200 else {}

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(ask, range(400)))
    failures = [r for r in results if r[0] != 200]
    assert not failures, f"{len(failures)} of 400 failed: {failures[:3]}"
    assert all(body["call"] == body["method"] == x + 10
               for x, (_, body) in enumerate(results))

    # A new user_config for Adder reaches its replicas; Front's calls see it.
    client.deploy_applications([calc(scale=3)])
    wait_for(lambda: httpx.get(url, params={"x": 1}).json()["call"] == 33, 30,
             "the new scale through the handle")


def test_sync_code_calls_a_handle_with_result(served) -> None:
    _, proxy, _ = served
    url = proxy.url + "/sync"
    wait_for(lambda: httpx.get(url, params={"x": 1}, timeout=5).status_code == 200, 30)
    assert httpx.get(url, params={"x": 1}).json() == {"call": 101}


def test_a_handle_from_outside_and_its_errors(served) -> None:
    _, _, controllers = served

    async def main() -> tuple[int, int]:
        adder = get_deployment_handle("Adder", "calc", controllers)
        first, second = adder.remote(5), adder.add.remote(x=6)  # run concurrently
        results = (await first, await second)
        with pytest.raises(HandleError, match="no method '_private'"):
            await adder.options(method_name="_private").remote()
        # What the target raised, as its own type, with the replica's traceback as the cause.
        with pytest.raises(TypeError, match="can only concatenate str") as raised:
            await adder.add.remote("not a number")
        assert "in add" in str(raised.value.__cause__)
        with pytest.raises(HandleError, match="unknown to the controller"):
            from servefleet._private.handles import handle_router
            handle_router.DISCOVERY_TIMEOUT_S = 1.0
            await get_deployment_handle("Nope", "calc", controllers).remote()
        return results

    assert asyncio.run(main()) == (15, 16)


def test_a_handle_call_wakes_a_deployment_scaled_to_zero(served) -> None:
    client, proxy, _ = served
    lazy = dpb.ReplicaConfig(autoscaling_config=dpb.AutoscalingConfig(
        min_replicas=0, initial_replicas=0, max_replicas=1, downscale_delay_s=600))
    lazy.MergeFrom(FAST)
    client.deploy_applications([apb.ApplicationSpec(
        name="lazy", import_path="graph_app:app", route_prefix="/lazy",
        runtime=dpb.RuntimeOptions(working_dir=APPS),
        deployments=[apb.DeploymentOverride(name="Adder", replica_config=lazy)])],
        partial=True)
    wait_for(lambda: client.application_status("lazy") is not None and any(
        d.name == "Front" and d.replica_states.get("RUNNING") for d in
        client.application_status("lazy").deployments), 60, "lazy's Front running")
    assert not client.replicas(application="lazy", deployment="Adder")
    # Front's handle queues the call, reports it at once, and the Adder starts.
    reply = httpx.get(f"{proxy.url}/lazy", params={"x": 1}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["call"] == 11
