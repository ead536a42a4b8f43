"""A proxy that starts while no controller answers (a restart during a
failover, or before the controller is up) must not answer 404 for a route
that exists: requests wait for its first route table. The chaos suite
caught a restarted proxy refusing a WebSocket with 404."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path

import httpx
import pytest
import websockets

from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def test_requests_to_a_proxy_without_routes_yet_wait_for_them(served_by, sqlite_fleet, engine,
                                                              tmp_path) -> None:
    client, _ = served_by
    client.deploy(d.DeploymentSpec(name="Hello", import_path="echo_app:hello",
                                   route_prefix="/hello",
                                   runtime=d.RuntimeOptions(working_dir=APPS)))
    client.deploy(d.DeploymentSpec(name="Ws", import_path="ws_app:WsApp", route_prefix="/ws",
                                   runtime=d.RuntimeOptions(working_dir=APPS)))
    wait_for(lambda: all(dep.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
                         for app in client.status().applications for dep in app.deployments)
             and len(client.list()) == 2, 60, "both deployments healthy")
    controller = sqlite_fleet.leader()
    controller.signal(signal.SIGSTOP)  # the proxy below gets no routes for now
    answers: dict[str, object] = {}
    try:
        proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                             extra_args=["--engine", engine]).start()

        def http() -> None:
            answers["http"] = httpx.get(proxy.url + "/hello", timeout=30)

        async def ws() -> None:
            url = proxy.url.replace("http://", "ws://") + "/ws/echo"
            async with websockets.connect(url, open_timeout=30) as connection:
                await connection.send("hi")
                answers["ws"] = await connection.recv()

        asking = [threading.Thread(target=http),
                  threading.Thread(target=lambda: asyncio.run(ws()))]
        for thread in asking:
            thread.start()
        asking[0].join(1.5)
        assert asking[0].is_alive(), f"answered before the proxy had routes: {answers}"
    finally:
        controller.signal(signal.SIGCONT)
    for thread in asking:
        thread.join(30)
    try:
        reply = answers["http"]
        assert isinstance(reply, httpx.Response)
        assert (reply.status_code, reply.text) == (200, "hello world")
        assert answers["ws"] == "hi"
    finally:
        proxy.stop()
