"""WebSockets through the proxy to a Starlette ingress (tests/apps/ws_app.py):
real controller (sqlite), proxy and replica processes, real WebSocket clients."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from servefleet.client import ControllerClient
from servefleet.testing import ProxyProcess, wait_for
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def ws_spec(marks: Path, replicas: int = 1, version: str = "v1", **config) -> d.DeploymentSpec:
    return d.DeploymentSpec(
        name="Ws", import_path="ws_app:WsApp", route_prefix="/ws", version=version,
        init_kwargs_json=json.dumps({"marks": str(marks)}),
        runtime=d.RuntimeOptions(working_dir=APPS),
        replica_config=d.ReplicaConfig(num_replicas=replicas, graceful_shutdown_wait_loop_s=0.1,
                                       graceful_shutdown_timeout_s=5, **config))


def running(client: ControllerClient) -> list[str]:
    return [r.record.replica_id for r in client.replicas()
            if r.state == replica_pb2.REPLICA_STATE_RUNNING]


@pytest.fixture
def ws_fleet(sqlite_fleet, tmp_path):
    """(client, proxy URL as ws://, marks dir, start_proxy)."""
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxies: list[ProxyProcess] = []

    def start_proxy(*args: str) -> ProxyProcess:
        proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                             extra_args=list(args)).start()
        proxies.append(proxy)
        return proxy

    marks = tmp_path / "marks"
    marks.mkdir()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        yield client, marks, start_proxy
        for proxy in proxies:
            proxy.stop()
        client.shutdown()


def ws_url(proxy: ProxyProcess, path: str) -> str:
    return proxy.url.replace("http://", "ws://") + path


def serving(proxy: ProxyProcess, replicas: int, client: ControllerClient) -> None:
    wait_for(lambda: len(running(client)) == replicas, 60, f"{replicas} replicas RUNNING")

    def echoes() -> bool:
        async def once() -> bool:
            try:
                async with connect(ws_url(proxy, "/ws/echo"), open_timeout=5) as ws:
                    await ws.send("hi")
                    return await ws.recv() == "hi"
            except (OSError, InvalidStatus, ConnectionClosed):
                return False
        return asyncio.run(once())
    wait_for(echoes, 30, "the WebSocket route at the proxy")


def test_messages_binary_frames_close_codes_and_the_handshake_pass_through(ws_fleet) -> None:
    client, marks, start_proxy = ws_fleet
    client.deploy(ws_spec(marks))
    proxy = start_proxy()
    serving(proxy, 1, client)

    async def session() -> None:
        offered = [Subprotocol("chat.v2"), Subprotocol("chat.v1")]
        async with connect(ws_url(proxy, "/ws/echo"), subprotocols=offered,
                           additional_headers={"x-request-id": "ws-1"}) as ws:
            assert ws.subprotocol == "chat.v2"  # chosen by the app
            assert ws.response.headers["x-app"] == "ws_app"
            assert ws.response.headers["x-root-path"] == "/ws"
            assert ws.response.headers["x-request-id"] == "ws-1"
            for i in range(1000):
                await ws.send(f"m{i}")
            assert [await ws.recv() for _ in range(1000)] == [f"m{i}" for i in range(1000)]
            blob = bytes(range(256)) * 40
            await ws.send(blob)
            assert await ws.recv() == blob
            await ws.send("close:4001")
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert (ws.close_code, ws.close_reason) == (4001, "bye")

        async with connect(ws_url(proxy, "/ws/push?n=50")) as ws:
            assert [message async for message in ws] == [f"tick {i}" for i in range(50)]
            assert ws.close_code == 1000

        # The client's close code reaches the app.
        async with connect(ws_url(proxy, "/ws/hold"),
                           additional_headers={"x-request-id": "closer"}) as ws:
            await ws.recv()
            await ws.close(4002)
        await asyncio.to_thread(wait_for, lambda: (marks / "closer-4002").exists(), 10,
                                "the app to see code 4002")

        with pytest.raises(InvalidStatus) as refused:  # no such route: the HTTP answer
            async with connect(ws_url(proxy, "/nowhere")):
                pass
        assert refused.value.response.status_code == 404
    asyncio.run(session())


def test_a_client_killed_mid_stream_is_seen_by_the_app_at_once(ws_fleet) -> None:
    client, marks, start_proxy = ws_fleet
    client.deploy(ws_spec(marks))
    proxy = start_proxy()
    serving(proxy, 1, client)
    script = ("import asyncio, sys\n"
              "from websockets.asyncio.client import connect\n"
              "async def main():\n"
              "    async with connect(sys.argv[1], additional_headers={'x-request-id': 'gone'})"
              " as ws:\n"
              "        print(await ws.recv(), flush=True)\n"
              "        await asyncio.sleep(60)\n"
              "asyncio.run(main())\n")
    child = subprocess.Popen([sys.executable, "-c", script, ws_url(proxy, "/ws/hold")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip().isdigit()
        os.kill(child.pid, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: any(marks.glob("gone-*")), 5, "the app to see the disconnect")
        seen = time.monotonic() - killed
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    print(f"the app saw the killed client's disconnect after {seen:.2f} s")
    assert seen < 1.0
