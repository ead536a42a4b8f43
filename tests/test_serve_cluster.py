"""servefleet.serve against a real embedded cluster (controller, proxy and
replica processes): run, status, get_app_handle, get_deployment_handle (from
the driver and inside a replica), get_replica_context in a replica, delete,
shutdown. The deployments are defined here and travel by value."""

from __future__ import annotations

import time

import httpx
import pytest

from servefleet import serve
from servefleet._private.local import embedded as local
from servefleet.serve.exceptions import RayServeException
from servefleet.serve.schema import ServeStatus

pytestmark = pytest.mark.slow


@serve.deployment
class Backend:
    def __call__(self, x: int) -> int:
        return x * 3


@serve.deployment(num_replicas=2)
class Frontend:
    def __init__(self, backend) -> None:
        self.backend = backend

    async def __call__(self, x: int) -> int:
        return await self.backend.remote(x) + 1

    async def by_name(self, x: int) -> dict:
        # Looked up inside a replica: this application by default, this cluster.
        backend = serve.get_deployment_handle("Backend")
        context = serve.get_replica_context()
        return {"value": await backend.remote(x), "app": context.app_name,
                "deployment": context.deployment, "tagged": bool(context.replica_tag)}


@serve.deployment
def hello() -> str:
    return "hello"


def test_run_status_lookups_and_delete_on_an_embedded_cluster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVEFLEET_CONTROLLER", raising=False)
    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    try:
        before = time.time()
        handle = serve.run(Frontend.bind(Backend.bind()), name="tripler", route_prefix=None)
        serve.run(hello.bind(), name="greeter", route_prefix="/hello")
        assert handle.remote(4).result(timeout_s=30) == 13

        status = serve.status()
        app = status.applications["tripler"]
        assert app.status == "RUNNING"
        assert before - 5 <= app.last_deployed_time_s <= time.time() + 5
        assert {n: d.status for n, d in app.deployments.items()} == \
            {"Backend": "HEALTHY", "Frontend": "HEALTHY"}
        assert app.deployments["Frontend"].replica_states == {"RUNNING": 2}
        assert app.deployments["Frontend"].status_trigger == "CONFIG_UPDATE_COMPLETED"
        assert status.applications["greeter"].status == "RUNNING"

        assert serve.get_app_handle("tripler").remote(2).result(timeout_s=30) == 7
        assert serve.get_app_handle("greeter").remote().result(timeout_s=30) == "hello"
        assert httpx.get(local.local_url() + "/hello", timeout=10).text == "hello"
        backend = serve.get_deployment_handle("Backend", app_name="tripler")
        assert backend.remote(5).result(timeout_s=30) == 15
        assert handle.by_name.remote(2).result(timeout_s=30) == {
            "value": 6, "app": "tripler", "deployment": "Frontend", "tagged": True}
        with pytest.raises(RayServeException, match="'nope' does not exist"):
            serve.get_app_handle("nope")
        with pytest.raises(RayServeException, match="'Missing'"):
            serve.get_deployment_handle("Missing", app_name="tripler")
        with pytest.raises(RayServeException, match="app_name"):
            serve.get_deployment_handle("Backend")

        serve.delete("tripler")
        assert "tripler" not in serve.status().applications
        assert "greeter" in serve.status().applications
        serve.delete("tripler")  # gone already: nothing to do
        with pytest.raises(RayServeException, match="does not exist"):
            serve.get_app_handle("tripler")
    finally:
        serve.shutdown()
    assert serve.status() == ServeStatus()
    with pytest.raises(RayServeException, match="no servefleet is running"):
        serve.get_app_handle("greeter")
