"""`ingress(app)` deployments served for real: controller (sqlite), proxy and
replica processes, HTTP and WebSocket clients (tests/apps/ingress_app.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def spec(name: str, import_path: str, prefix: str, init_args_json: str = "") -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path=import_path, route_prefix=prefix,
                            init_args_json=init_args_json,
                            runtime=d.RuntimeOptions(working_dir=APPS))


@pytest.fixture
def served(sqlite_fleet, tmp_path):
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path).start()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        yield client, proxy
        proxy.stop()
        client.shutdown()


def test_route_methods_bodies_and_a_websocket_under_a_route_prefix(served) -> None:
    client, proxy = served
    client.deploy(spec("Shop", "ingress_app:Shop", "/shop",
                       init_args_json='["alice"]'))
    base = proxy.url + "/shop"
    wait_for(lambda: httpx.get(base + "/", timeout=5).status_code == 200, 60, "the route")

    home = httpx.get(base).json()  # the prefix itself is the app's "/"
    assert (home["owner"], home["root_path"]) == ("alice", "/shop")
    # url_for builds the link the client used: under the prefix, on the
    # proxy's address (the proxy passes the client's Host on, as Ray's does).
    assert home["url"] == base + "/"
    put = httpx.put(base + "/items/3", json={"name": "lamp", "price": 9.5})
    assert (put.status_code, put.json()) == (201, {"stored": 3, "count": 1})
    assert httpx.get(base + "/items/3", params={"q": "x"}).json() == {
        "owner": "alice", "item_id": 3, "q": "x", "item": {"name": "lamp", "price": 9.5}}
    assert httpx.get(base + "/items/lamp").status_code == 422  # FastAPI's validation
    assert httpx.put(base + "/items/4", json={"name": "no price"}).status_code == 422
    outside = httpx.get(base + "/outside").json()  # an app route, with the lifespan's state
    assert outside == {"outside": True, "started_in": home["pid"]}
    assert httpx.get(base + "/nowhere").status_code == 404

    async def chat() -> list[str]:
        url = proxy.url.replace("http://", "ws://") + "/shop/ws/lobby"
        async with connect(url) as ws:
            answers = []
            for text in ("hi", "again"):
                await ws.send(text)
                answers.append(str(await ws.recv()))
            return answers
    assert asyncio.run(chat()) == ["alice@lobby: hi", "alice@lobby: again"]


def test_the_builder_forms_with_and_without_a_class(served) -> None:
    client, proxy = served
    client.deploy(spec("Built", "ingress_app:Built", "/built"))
    client.deploy(spec("Standalone", "ingress_app:ASGIIngressDeployment", "/alone"))
    for prefix in ("/built", "/alone"):
        url = proxy.url + prefix
        wait_for(lambda url=url: httpx.get(url + "/", timeout=5).status_code == 200, 60,
                 f"the route {prefix}")
        assert httpx.get(url + "/").json() == {"built": True, "root_path": prefix}
        assert httpx.get(url + "/sum/20/22").json() == 42
