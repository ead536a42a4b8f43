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

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.typing import Subprotocol

from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
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
def ws_fleet(sqlite_fleet, engine, tmp_path):
    """(client, marks dir, start_proxy), the proxies of each engine in turn."""
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxies: list[ProxyProcess] = []

    def start_proxy(*args: str) -> ProxyProcess:
        proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                             extra_args=["--engine", engine, *args]).start()
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
    if "haproxy" in proxy.extra_args:  # HAProxy's own rules, not the Python path's, by now
        wait_for(lambda: f'haproxy_backend_active_servers{{proxy="d.default.Ws"}} {replicas}\n'
                 in httpx.get(proxy.url + "/-/metrics").text, 30, "HAProxy serving the route")


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


async def _hold(proxy: ProxyProcess, request_id: str):
    """An open /ws/hold WebSocket and the pid of the replica that holds it."""
    ws = await connect(ws_url(proxy, "/ws/hold"), additional_headers={"x-request-id": request_id})
    return ws, int(await ws.recv())


def test_websockets_hold_slots_spread_over_replicas_and_queue_past_them(ws_fleet) -> None:
    """50 WebSockets over 2 replicas with max_ongoing_requests 30 use both;
    with 60 open, the 61st waits for a slot (as an HTTP request would) and
    gets the first one freed. Then the proxy drains: 1001 for all."""
    import re

    import httpx

    client, marks, start_proxy = ws_fleet
    client.deploy(ws_spec(marks, replicas=2, max_ongoing_requests=30))
    proxy = start_proxy("--drain-timeout-s", "2")
    serving(proxy, 2, client)
    haproxy = "haproxy" in proxy.extra_args

    async def session() -> None:
        opened = [await _hold(proxy, f"s{i}") for i in range(50)]
        pids = [pid for _, pid in opened]
        assert len(set(pids)) == 2 and min(pids.count(p) for p in set(pids)) >= 20
        opened += [await _hold(proxy, f"s{i}") for i in range(50, 60)]
        assert all(pids.count(p) <= 30 for p in set(pid for _, pid in opened))
        extra = asyncio.create_task(_hold(proxy, "extra"))
        await asyncio.sleep(1.0)
        assert not extra.done()  # queued at the proxy: no replica has room
        metrics = (await asyncio.to_thread(httpx.get, proxy.url + "/-/metrics")).text
        if haproxy:  # its own figures: connections in use at each replica
            assert sum(int(n) for n in re.findall(
                r'^haproxy_server_used_connections_current\{proxy="d.default.Ws",[^}]*\} (\d+)$',
                metrics, re.M)) == 60, metrics[-2000:]
        else:
            assert re.search(r'^servefleet_proxy_websockets_open\{[^}]*deployment="Ws"\} 60\.0$',
                             metrics, re.M), metrics[-2000:]
        await opened[0][0].close()
        ws, _ = await asyncio.wait_for(extra, 10)
        opened[0] = (ws, 0)
        # The proxy drains (SIGTERM): every WebSocket is closed with 1001
        # (HAProxy's tunnels at --drain-timeout-s, with no close frame).
        assert proxy.proc is not None
        proxy.proc.send_signal(signal.SIGTERM)
        for ws, _ in opened:
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            assert ws.close_code == (1006 if haproxy else 1001)
    asyncio.run(session())


def test_a_handshake_a_full_replica_refuses_goes_to_the_other(ws_fleet) -> None:
    """Replica A is full (max_ongoing_requests 2) with WebSockets opened to it
    directly, which the proxy does not know of. The proxy's first WebSocket
    lands on B (straight, or after A refused it); for the second the proxy
    picks A, the less loaded by its own count: A refuses the handshake
    unread ("overloaded") and it goes to B, which has room."""
    import re

    import httpx

    client, marks, start_proxy = ws_fleet
    client.deploy(ws_spec(marks, replicas=2, max_ongoing_requests=2))
    proxy = start_proxy()
    serving(proxy, 2, client)
    full = client.replicas()[0].record

    async def session() -> None:
        direct = f"ws://{full.http_address}/hold"  # no route prefix: the app's own path
        async with connect(direct) as one, connect(direct) as two:
            full_pid = int(await one.recv())
            assert int(await two.recv()) == full_pid
            first, first_pid = await _hold(proxy, "first")
            second, second_pid = await asyncio.wait_for(_hold(proxy, "second"), 10)
            assert full_pid != first_pid == second_pid
            await first.close()
            await second.close()
    asyncio.run(session())
    metrics = httpx.get(proxy.url + "/-/metrics", timeout=10).text
    if "haproxy" in proxy.extra_args:  # a try on another server is a redispatch to HAProxy
        refused = sum(float(n) for n in re.findall(
            r'^haproxy_backend_(?:retry|redispatch)_warnings_total\{proxy="d.default.Ws"\} (\S+)$',
            metrics, re.M))
    else:
        found = re.search(r'^servefleet_retries_total\{[^}]*deployment="Ws"[^}]*'
                          r'reason="overloaded"[^}]*\} (\S+)$', metrics, re.M)
        refused = float(found.group(1)) if found else 0.0
    assert refused >= 1, metrics[-3000:]


def test_a_rolling_update_closes_websockets_with_1001_and_they_reconnect(ws_fleet) -> None:
    from loadgen import SteadyLoad

    client, marks, start_proxy = ws_fleet
    client.deploy(ws_spec(marks, replicas=2))
    proxy = start_proxy()
    serving(proxy, 2, client)
    old = set(running(client))

    async def session() -> None:
        opened = [await _hold(proxy, f"r{i}") for i in range(10)]
        old_pids = {pid for _, pid in opened}
        with SteadyLoad(proxy.url + "/ws/", concurrency=4) as load:
            await asyncio.to_thread(client.deploy, ws_spec(marks, replicas=2, version="v2"))
            for ws, _ in opened:
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 30)
                assert ws.close_code == 1001
            again = [await _hold(proxy, f"again{i}") for i in range(4)]
            await asyncio.to_thread(
                wait_for, lambda: len(running(client)) == 2 and not old & set(running(client)),
                60, "the rollout to finish")
        assert load.bad == [] and load.ok > 0
        assert not {pid for _, pid in again} & old_pids  # on the new replicas
        for ws, _ in again:
            await ws.close()
    asyncio.run(session())


def test_the_idle_timeout_is_its_own_setting(ws_fleet) -> None:
    client, marks, start_proxy = ws_fleet
    client.deploy(ws_spec(marks))
    proxy = start_proxy("--websocket-idle-timeout-s", "1", "--request-timeout-s", "0.5")
    serving(proxy, 1, client)

    async def session() -> None:
        ws, _ = await _hold(proxy, "idle")
        started = time.monotonic()
        await asyncio.sleep(0.7)  # past the request timeout: still open
        await ws.send("still here")
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 5)
        assert ws.close_code == 1001 and 1.5 < time.monotonic() - started < 3.5
    asyncio.run(session())
    wait_for(lambda: (marks / "idle-1001").exists(), 5, "the app to see 1001")
