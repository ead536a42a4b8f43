"""What only the HAProxy engine does: reloads, its counters and logs as the
controller's figures. (The behaviour both engines share is tested on both:
the `served_by` fixture.)"""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import psutil
import pytest
from loadgen import SteadyLoad
from test_proxy import all_healthy, app_spec, routed

from servefleet._private.testing import (
    ControllerProcess,
    ProxyProcess,
    free_port,
    stop_cluster,
    wait_for,
)
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2, replica_pb2

pytestmark = pytest.mark.slow


def test_route_changes_reload_haproxy_with_no_request_lost(sqlite_fleet, tmp_path) -> None:
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--engine", "haproxy"])
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(app_spec("Echo", "echo_app:Echo", "/echo", 2))
        wait_for(lambda: all_healthy(client, 1), what="healthy")
        proxy.start()
        wait_for(lambda: routed(proxy, "/echo"), 30, "route at the proxy")
        fresh: list[str] = []  # a new connection per request: none may be refused
        stop = threading.Event()

        def connections() -> None:
            while not stop.is_set():
                try:
                    reply = httpx.get(proxy.url + "/echo", timeout=10)
                    if reply.status_code != 200:
                        fresh.append(f"{reply.status_code} {reply.text[:80]}")
                except httpx.HTTPError as e:
                    fresh.append(f"{type(e).__name__}: {e}")

        opener = threading.Thread(target=connections)
        try:
            with SteadyLoad(proxy.url + "/echo") as load:
                opener.start()
                for round_ in range(3):  # each new or removed route is a reload
                    client.deploy(app_spec(f"Hello{round_}", "echo_app:hello", f"/h{round_}"))
                    wait_for(lambda r=round_: routed(proxy, f"/h{r}"), 60, f"route /h{round_}")
                before = load.ok
                wait_for(lambda: load.ok > before + 50, what="traffic after the reloads")
        finally:
            stop.set()
            if opener.is_alive():
                opener.join()
            proxy.stop()
            client.shutdown()
    reloads = proxy.logs().count("HAProxy reloaded")
    print(f"{reloads} reloads under load: {load.ok} ok, {len(load.bad)} failed; "
          f"fresh connections failed: {len(fresh)}")
    assert reloads >= 3
    # No connection refused, no request failed: kept-alive connections too
    # (the old worker closes each after its next answer, never under a
    # client that is sending: option idle-close-on-response).
    assert fresh == [] and load.bad == [], (fresh[:5], load.bad[:5])


def test_haproxy_counters_and_failures_reach_the_controller(tmp_path, cluster) -> None:
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, runtime="process",
                                   extra_args=["--metrics-listen", http,
                                               "--allow-working-dir", "/"]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp_path,
                         extra_args=["--engine", "haproxy"])
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy(app_spec("Hello", "echo_app:hello", "/hello"))
        wait_for(lambda: all_healthy(client, 1), 60, "healthy")
        proxy.start()
        wait_for(lambda: routed(proxy, "/hello"), 30, "route at the proxy")
        for _ in range(30):
            assert httpx.get(proxy.url + "/hello").status_code == 200
        failed = httpx.get(proxy.url + "/hello", params={"fail": "1"},
                           headers={"x-request-id": "broken-1"})
        assert failed.status_code == 500 and failed.headers["x-request-id"] == "broken-1"

        def status() -> dict:
            return httpx.get(f"http://{http}/api/status").json()

        seen = wait_for(lambda: (s := status())["recent_errors"] and s, 10,
                        "the failure in the controller's recent errors")
        (error,) = seen["recent_errors"]
        assert (error["request_id"], error["http_status"], error["deployment"],
                error["route"]) == ("broken-1", 500, "Hello", "/hello")

        # A report's counters can be sampled just before the failure its recent
        # errors carry, and a window shows only until the next report: a
        # failure goes with every look, so each window has one (CI saw 0 errors/s).
        def traffic_with_errors() -> dict | None:
            httpx.get(proxy.url + "/hello", params={"fail": "1"})
            traffic = status()["applications"][0]["deployments"][0].get("traffic")
            return traffic if traffic and traffic["requests_per_s"] > 0 \
                and traffic["errors_per_s"] > 0 else None
        wait_for(traffic_with_errors, 10, "HAProxy's counters as the deployment's traffic")
    finally:
        stop_cluster(controller, client, [proxy])


def test_connections_to_a_replica_added_at_run_time_are_kept_and_reused(sqlite_fleet,
                                                                        tmp_path) -> None:
    """A replica that comes after HAProxy started (a scale-up here; a rollout
    or `servefleet up`, whose proxy starts before its replicas, alike) is a
    server added over the runtime API. Its connections are kept and reused
    as a server's of the configuration file are: each replica counts the
    connections its requests came over (before: one per request, 30 for 30,
    to the added replica; the first replica's 1 or 2)."""
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--engine", "haproxy"])

    def peers(replicas: int) -> deployment_pb2.DeploymentSpec:
        spec = app_spec("Peer", "peer_port_app:peer", "/peer", replicas)
        # No proxy trusted: the replica's `request.client` is the TCP peer.
        spec.runtime.env["FORWARDED_ALLOW_IPS"] = ""
        return spec

    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client, \
            httpx.Client(base_url=proxy.url, timeout=10) as http:
        client.deploy(peers(1))
        wait_for(lambda: all_healthy(client, 1), what="healthy")
        proxy.start()  # the first replica is a server of its configuration file
        try:
            wait_for(lambda: routed(proxy, "/peer"), 30, "route at the proxy")
            # HAProxy starts before the first routes come, then takes them by a reload.
            reloads = wait_for(lambda: proxy.logs().count("HAProxy reloaded"), 30,
                               "HAProxy routing /peer")
            client.deploy(peers(2))
            wait_for(lambda: len({http.get("/peer").json()["pid"] for _ in range(4)}) == 2,
                     60, "the second replica served")
            # The second replica's server came without a reload: by `add server`.
            assert proxy.logs().count("HAProxy reloaded") == reloads
            ports: dict[int, set[int]] = {}
            served: dict[int, int] = {}
            for _ in range(60):  # one client connection, kept alive
                answer = http.get("/peer").json()
                ports.setdefault(answer["pid"], set()).add(answer["port"])
                served[answer["pid"]] = served.get(answer["pid"], 0) + 1
        finally:
            proxy.stop()
            client.shutdown()
    print(f"requests per replica: {served}; connections: "
          f"{ {pid: len(p) for pid, p in ports.items()} }")
    assert len(served) == 2 and min(served.values()) >= 10, served  # leastconn takes turns
    # Reused: the few connections opened for first requests of client
    # connections (HAProxy's http-reuse safe), and one more if the idle
    # purge closed one; far fewer than the 30 requests each replica had.
    assert all(len(p) <= 4 for p in ports.values()), (served, ports)


def test_the_proxy_s_own_paths_stay_its_own_under_a_route_at_the_root(sqlite_fleet,
                                                                       tmp_path) -> None:
    """/-/healthz, /-/routes and /-/metrics are the proxy's whatever the
    routes, as the Python engine answers them before routing (before: with a
    route at /, as `servefleet up module:app` makes, HAProxy sent them to
    the replicas, so a load balancer's probe never saw a draining proxy)."""
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--engine", "haproxy"])
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(app_spec("Show", "headers_app:show", "/"))
        wait_for(lambda: all_healthy(client, 1), what="healthy")
        proxy.start()
        try:
            wait_for(lambda: "HAProxy reloaded" in proxy.logs(), 30, "HAProxy routing /")
            wait_for(lambda: routed(proxy, "/anything"), 30, "route at the proxy")
            assert "x-servefleet-route-prefix" in httpx.get(proxy.url + "/-/other").json()
            health = httpx.get(proxy.url + "/-/healthz")
            routes = httpx.get(proxy.url + "/-/routes")
            metrics = httpx.get(proxy.url + "/-/metrics")
        finally:
            proxy.stop()
            client.shutdown()
    assert (health.status_code, health.text) == (200, "ok")
    assert routes.json() == {"/": "default/Show"}, routes.text
    assert "haproxy_backend_connection_attempts_total" in metrics.text, metrics.text[:300]


def test_a_killed_haproxy_is_started_again_and_none_outlives_its_proxy(sqlite_fleet,
                                                                      tmp_path) -> None:
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--engine", "haproxy"])
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(app_spec("Hello", "echo_app:hello", "/hello"))
        wait_for(lambda: all_healthy(client, 1), what="healthy")
        proxy.start()
        try:
            wait_for(lambda: routed(proxy, "/hello"), 30, "route at the proxy")
            assert proxy.proc is not None

            def haproxies() -> list[psutil.Process]:
                return [p for p in psutil.Process(proxy.proc.pid).children(recursive=True)
                        if p.name() == "haproxy"]
            (master,) = [p for p in haproxies() if p.ppid() == proxy.proc.pid]
            master.kill()
            wait_for(lambda: routed(proxy, "/hello"), 15, "HAProxy serving again")
            assert "HAProxy exited; starting it again" in proxy.logs()
            survivors = haproxies()
            assert survivors and master.pid not in [p.pid for p in survivors]
            proxy.proc.kill()  # SIGKILL: no drain, no cleanup of its own
            proxy.proc.wait()
            _, alive = psutil.wait_procs(survivors, timeout=10)
            assert alive == [], f"HAProxy outlived its proxy: {alive}"
        finally:
            proxy.stop()
            client.shutdown()


def test_a_traffic_split_is_haproxy_s_and_a_shadow_moves_the_route_to_python(
        sqlite_fleet, tmp_path) -> None:
    from collections import Counter
    from concurrent.futures import ThreadPoolExecutor

    from test_app_serving import APPS, running

    from servefleet.v1 import application_pb2 as apb
    from servefleet.v1 import deployment_pb2 as dpb

    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--engine", "haproxy"])
    marks = tmp_path / "marks"
    marks.mkdir()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy_applications([apb.ApplicationSpec(
            name="ab", route_prefix="/ab", import_path="traffic_app:build",
            args_json=f'{{"marks_dir": "{marks}"}}', runtime=dpb.RuntimeOptions(working_dir=APPS))])
        wait_for(lambda: running(client, "ab"), 60, "ab RUNNING")
        proxy.start()
        try:
            url = proxy.url + "/ab"
            client.set_traffic("ab", apb.TrafficPolicy(split=[
                apb.WeightedDeployment(deployment="Primary", weight=70),
                apb.WeightedDeployment(deployment="Canary", weight=30)]))
            wait_for(lambda: any(httpx.get(url).json()["label"] == "canary"
                                 for _ in range(20)), 30, "the split")
            with httpx.Client() as http, ThreadPoolExecutor(8) as pool:
                labels = Counter(pool.map(lambda _: http.get(url).json()["label"], range(1000)))
            assert set(labels) == {"primary", "canary"}
            assert abs(labels["canary"] / 1000 - 0.30) <= 0.06, labels
            metrics = httpx.get(proxy.url + "/-/metrics").text
            assert 'haproxy_backend_http_requests_total{proxy="d.ab.Canary"}' in metrics
            client.set_traffic("ab", apb.TrafficPolicy(split=[
                apb.WeightedDeployment(deployment="Primary", weight=1)],
                shadow=apb.ShadowTarget(deployment="Shadow", fraction=1.0)))
            wait_for(lambda: httpx.get(url).status_code == 200 and len(list(marks.iterdir())),
                     30, "copies to the shadow: the Python path serves the route")
        finally:
            proxy.stop()
            client.shutdown()


def test_a_websocket_outlives_reloads_for_other_routes(sqlite_fleet, tmp_path) -> None:
    import asyncio

    from test_websocket import running, ws_spec, ws_url
    from websockets.asyncio.client import connect

    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--engine", "haproxy", "--drain-timeout-s", "1"])
    (tmp_path / "marks").mkdir()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(ws_spec(tmp_path / "marks"))
        wait_for(lambda: len(running(client)) == 1, 60, "Ws RUNNING")
        proxy.start()
        try:
            wait_for(lambda: routed(proxy, "/ws/"), 30, "route at the proxy")

            async def session() -> None:
                async with connect(ws_url(proxy, "/ws/echo")) as ws:
                    await ws.send("before")
                    assert await ws.recv() == "before"
                    for name in ("A", "B"):  # two reloads; the socket is the old worker's
                        await asyncio.to_thread(client.deploy, app_spec(
                            name, "echo_app:hello", f"/{name.lower()}"))
                        await asyncio.to_thread(wait_for, lambda n=name: routed(
                            proxy, f"/{n.lower()}"), 60, f"route /{name.lower()}")
                    await asyncio.sleep(2)  # past the drain timeout: not what bounds it
                    await ws.send("after")
                    assert await asyncio.wait_for(ws.recv(), 5) == "after"
            asyncio.run(session())
            assert proxy.logs().count("HAProxy reloaded") >= 2
        finally:
            proxy.stop()
            client.shutdown()


def test_a_lone_replica_drains_only_once_a_lagging_engine_let_it_go(sqlite_fleet,
                                                                     tmp_path) -> None:
    """The proxy process is stopped (SIGSTOP) through a rollout of a lone
    replica: HAProxy, its child, serves on with the old replica alone. The
    controller holds the old replica's drain until the proxy has taken the
    new set into HAProxy and said so in a load report, so no request is
    refused (before: the drain began at once, the replica refused after its
    wait loop, and HAProxy had no other server to retry on)."""
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--engine", "haproxy"])

    def lone(version: str) -> deployment_pb2.DeploymentSpec:
        spec = app_spec("Echo", "echo_app:Echo", "/echo", 1)
        spec.version = version
        spec.replica_config.graceful_shutdown_wait_loop_s = 0.3
        return spec

    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(lone("v1"))
        wait_for(lambda: all_healthy(client, 1), what="v1 healthy")
        proxy.start()
        wait_for(lambda: routed(proxy, "/echo"), 30, "route at the proxy")
        try:
            with SteadyLoad(proxy.url + "/echo", concurrency=2) as load:
                wait_for(lambda: load.ok > 50, what="traffic before the rollout")
                assert proxy.proc is not None
                os.kill(proxy.proc.pid, signal.SIGSTOP)
                try:
                    client.deploy(lone("v2"))
                    wait_for(lambda: any(r.state == replica_pb2.REPLICA_STATE_STOPPING
                                         for r in client.replicas()), 60, "v1 stopping")
                    time.sleep(2.0)  # the old replica's wait loop, many times over
                    served = load.ok
                finally:
                    os.kill(proxy.proc.pid, signal.SIGCONT)
                wait_for(lambda: len(client.replicas()) == 1 and all(
                    r.state == replica_pb2.REPLICA_STATE_RUNNING for r in client.replicas()),
                    60, "v1 gone, v2 running")
                after = load.ok
                wait_for(lambda: load.ok > after + 50, what="traffic after the rollout")
        finally:
            proxy.stop()
            client.shutdown()
    print(f"lone-replica rollout under a stopped proxy: {load.ok} ok "
          f"({served} before SIGCONT), {len(load.bad)} failed")
    assert load.bad == [], load.bad[:5]
