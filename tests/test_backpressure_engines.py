"""A deployment's backpressure_config at the HTTP edge, on each proxy engine:
a request past max_queued_requests gets the same answer from the Python
path and from HAProxy (status, Retry-After, text, request id)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from loadgen import answers

from servefleet._private.testing import wait_for
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def slow(name: str, max_queued: int, status: int, retry_after_s: float) -> d.DeploymentSpec:
    return d.DeploymentSpec(
        name=name, import_path="echo_app:Slow", route_prefix=f"/{name.lower()}",
        runtime=d.RuntimeOptions(working_dir=APPS),
        replica_config=d.ReplicaConfig(
            num_replicas=1, max_ongoing_requests=1, max_queued_requests=max_queued,
            graceful_shutdown_wait_loop_s=0.1, graceful_shutdown_timeout_s=5,
            backpressure=d.BackpressureConfig(status_code=status, retry_after_s=retry_after_s)))


def test_a_full_deployment_answers_as_its_backpressure_config_says(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(slow("Queued", 1, 429, 2.1))
    client.deploy(slow("Unqueued", 0, 503, 0.5))  # no queue: refused when the replica is busy
    wait_for(lambda: sum(dep.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
                         for app in client.status().applications
                         for dep in app.deployments) == 2, what="healthy")
    proxy = start_proxy()
    wait_for(lambda: answers(proxy.url + "/queued?s=0") and answers(proxy.url + "/unqueued?s=0"),
             30, "routes at the proxy")

    async def burst(path: str, n: int) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as http:
            first = asyncio.ensure_future(http.get(proxy.url + path, params={"s": "1.5"}))
            await asyncio.sleep(0.3)  # the replica holds it; the others come while it does
            rest = await asyncio.gather(*[http.get(proxy.url + path, params={"s": "0"},
                                                   headers={"x-request-id": f"r{i}"})
                                          for i in range(n)])
            return [await first, *rest]

    async def both() -> tuple[list[httpx.Response], list[httpx.Response]]:
        return await asyncio.gather(burst("/queued", 4), burst("/unqueued", 2))

    queued, unqueued = asyncio.run(both())
    # One runs, one waits in the queue, the other three are refused with
    # 429 and Retry-After: 3 (2.1 s rounded up), as the Python path says them.
    assert sorted(r.status_code for r in queued) == [200, 200, 429, 429, 429]
    for reply in queued[1:]:
        if reply.status_code == 429:
            assert reply.headers["retry-after"] == "3"
            assert reply.headers["content-type"] == "text/plain; charset=utf-8"
            assert reply.text == "Queued is overloaded: 1 requests already queued"
            assert reply.headers["x-request-id"].startswith("r")
    assert [r.status_code for r in unqueued] == [200, 503, 503]
    assert {r.headers.get("retry-after") for r in unqueued[1:]} == {"1"}
    assert {r.text for r in unqueued[1:]} == {"Unqueued is overloaded: 0 requests already queued"}
