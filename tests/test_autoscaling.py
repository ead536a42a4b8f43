"""Autoscaling with a real controller, proxy and replica processes and real HTTP."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from loadgen import SteadyLoad, answers

from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
RUNNING = replica_pb2.REPLICA_STATE_RUNNING


def slow_spec(**autoscaling) -> d.DeploymentSpec:
    """echo_app.Slow (answers after ?s= seconds) under /slow, autoscaled."""
    return d.DeploymentSpec(
        name="Slow", import_path="echo_app:Slow", route_prefix="/slow",
        runtime=d.RuntimeOptions(working_dir=APPS),
        replica_config=d.ReplicaConfig(
            graceful_shutdown_wait_loop_s=0.1, graceful_shutdown_timeout_s=5,
            autoscaling_config=d.AutoscalingConfig(**autoscaling)))


def running(client: ControllerClient) -> int:
    return sum(1 for r in client.replicas(deployment="Slow") if r.state == RUNNING)


def answered(proxy: ProxyProcess, path: str) -> bool:
    return answers(proxy.url + path, timeout=30)


def test_load_scales_out_to_max_and_back_with_no_failed_request(served) -> None:
    client, start_proxy = served
    client.deploy(slow_spec(min_replicas=1, max_replicas=4, target_ongoing_requests=2,
                            upscale_delay_s=0.5, downscale_delay_s=3, look_back_period_s=2))
    proxy = start_proxy()
    wait_for(lambda: answered(proxy, "/slow?s=0"), 60, "the route at the proxy")
    assert running(client) == 1
    with SteadyLoad(proxy.url + "/slow?s=0.1", concurrency=16) as load:
        wait_for(lambda: running(client) == 4, 60, "4 replicas under 16 clients")
        record = client.get("Slow")
        assert record.autoscale.target_replicas == 4
        assert "to 4: load" in record.autoscale.reason
        time.sleep(1)  # traffic on all four, before the load stops
    assert load.ok > 50 and load.bad == [], load.bad[:5]
    wait_for(lambda: running(client) == 1, 60, "back to 1 with no load")
    assert client.get("Slow").autoscale.target_replicas == 1
    assert answered(proxy, "/slow?s=0")


def test_scale_to_zero_and_a_cold_start_for_one_request_and_for_a_burst(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(slow_spec(min_replicas=0, initial_replicas=0, max_replicas=2,
                            target_ongoing_requests=10, downscale_delay_s=1,
                            downscale_to_zero_delay_s=1, look_back_period_s=1))
    proxy = start_proxy()
    wait_for(lambda: "/slow" in httpx.get(proxy.url + "/-/routes").text, 30, "the route")
    assert running(client) == 0
    start = time.perf_counter()
    reply = httpx.get(proxy.url + "/slow?s=0", timeout=60)
    cold = time.perf_counter() - start
    assert reply.status_code == 200, reply.text
    print(f"cold start from zero replicas: first request answered in {cold:.2f} s")
    wait_for(lambda: running(client) == 0, 60, "back to zero replicas")

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=60) as http:
            replies = await asyncio.gather(*[http.get(proxy.url + "/slow?s=0.1")
                                             for _ in range(20)])
        return [r.status_code for r in replies]

    start = time.perf_counter()
    codes = asyncio.run(burst())
    assert codes == [200] * 20
    print(f"burst of 20 from zero: all answered in {time.perf_counter() - start:.2f} s")


def test_a_new_leader_keeps_the_scaled_out_count(etcd_fleet, tmp_path) -> None:
    etcd_fleet.start(2, runtime="process", lease_ttl=2)
    leader = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses(), timeout=30) as client:
        client.deploy(slow_spec(min_replicas=1, initial_replicas=1, max_replicas=4,
                                target_ongoing_requests=2, upscale_delay_s=0,
                                downscale_delay_s=600, look_back_period_s=1))
        proxy = ProxyProcess(etcd_fleet.addresses(), log_dir=tmp_path).start()
        try:
            wait_for(lambda: answered(proxy, "/slow?s=0"), 60, "the route at the proxy")
            with SteadyLoad(proxy.url + "/slow?s=0.2", concurrency=16):
                wait_for(lambda: running(client) == 4, 60, "4 replicas under load")
            leader.kill()
            assert etcd_fleet.leader(timeout=15) is not leader
            # Nothing asks the new leader for a change (downscale_delay_s is
            # long), so the count must stay 4 through its first seconds, not
            # fall to initial_replicas.
            counts = []
            for _ in range(8):
                counts.append(running(client))
                time.sleep(0.5)
            assert client.get("Slow").autoscale.target_replicas == 4
            assert min(counts) == 4, counts
        finally:
            proxy.stop()
            client.shutdown()
