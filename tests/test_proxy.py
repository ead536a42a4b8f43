"""The HTTP proxy with a real controller, real replicas and real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from pathlib import Path

import httpx
import pytest
from loadgen import SteadyLoad, answers
from prometheus_client.parser import text_string_to_metric_families

from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def app_spec(name: str, import_path: str, route: str, replicas: int = 1,
             **config) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path=import_path, route_prefix=route,
                            runtime=d.RuntimeOptions(working_dir=APPS),
                            replica_config=d.ReplicaConfig(
                                num_replicas=replicas, graceful_shutdown_wait_loop_s=0.1,
                                graceful_shutdown_timeout_s=5, **config))


def all_healthy(client: ControllerClient, count: int) -> bool:
    deps = [dep for app in client.status().applications for dep in app.deployments]
    return len(deps) == count and all(
        dep.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY for dep in deps)


def routed(proxy: ProxyProcess, path: str) -> bool:
    return answers(proxy.url + path)


def test_routing_streaming_and_request_ids(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(app_spec("Hello", "echo_app:hello", "/hello"))
    client.deploy(app_spec("Numbers", "echo_app:numbers", "/hello/numbers"))
    client.deploy(app_spec("Slow", "echo_app:Slow", "/slow"))
    client.deploy(app_spec("Paced", "echo_app:paced", "/paced"))
    wait_for(lambda: all_healthy(client, 4), what="4 deployments healthy")
    proxy = start_proxy()
    wait_for(lambda: routed(proxy, "/slow?s=0"), 30, "routes at the proxy")

    assert httpx.get(proxy.url + "/hello", params={"name": "x"}).text == "hello x"
    assert httpx.get(proxy.url + "/hello/numbers").text == "0\n1\n2\n"  # longest prefix
    missing = httpx.get(proxy.url + "/nowhere")
    assert missing.status_code == 404 and "/hello" in missing.text
    assert json.loads(httpx.get(proxy.url + "/-/routes").text) == {
        "/hello": "default/Hello", "/hello/numbers": "default/Numbers", "/slow": "default/Slow",
        "/paced": "default/Paced"}
    assert httpx.get(proxy.url + "/-/healthz").text == "ok"

    with httpx.stream("GET", proxy.url + "/paced") as reply:  # each chunk as it comes
        assert [c for c in reply.iter_text() if c] == ["0\n", "1\n", "2\n"]

    kept = httpx.get(proxy.url + "/slow", params={"s": "0"}, headers={"x-request-id": "rid-1"})
    assert kept.headers["x-request-id"] == "rid-1" and kept.json()["request_id"] == "rid-1"
    made = httpx.get(proxy.url + "/slow", params={"s": "0"})
    assert made.json()["request_id"] == made.headers["x-request-id"]
    # Hop-by-hop headers, including those the Connection header names, stay behind.
    hop = httpx.get(proxy.url + "/slow", params={"s": "0"}, headers={
        "connection": "keep-alive, x-hop", "x-hop": "1", "x-end-to-end": "1"}).json()["headers"]
    assert "x-end-to-end" in hop and "x-hop" not in hop and "connection" not in hop
    assert any(p.address.endswith(str(proxy.port)) for p in client.status().proxies)
    if "haproxy" in proxy.extra_args:  # HAProxy itself took them to the replicas
        metrics = httpx.get(proxy.url + "/-/metrics").text
        served = re.search(r'haproxy_backend_http_requests_total\{proxy="d.default.Slow"\} (\d+)',
                           metrics)
        assert served is not None and int(served.group(1)) >= 3, metrics[-2000:]
        list(text_string_to_metric_families(metrics))  # one exposition Prometheus can parse


def test_overload_is_503_and_timeouts_are_504(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(app_spec("Slow", "echo_app:Slow", "/slow", 1, max_ongoing_requests=1,
                           max_queued_requests=1))
    wait_for(lambda: all_healthy(client, 1), what="healthy")
    proxy = start_proxy("--request-timeout-s", "3")
    wait_for(lambda: routed(proxy, "/slow?s=0"), 30, "route at the proxy")

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=30) as http:
            return await asyncio.gather(*[http.get(proxy.url + "/slow", params={"s": "1"},
                                                   headers={"x-request-id": f"b{i}"})
                                          for i in range(5)])

    # One runs, one waits in the queue, three are refused; each answer has its id.
    replies = asyncio.run(burst())
    assert sorted(r.status_code for r in replies) == [200, 200, 503, 503, 503]
    assert [r.headers.get("x-request-id") for r in replies] == [f"b{i}" for i in range(5)]
    late = httpx.get(proxy.url + "/slow", params={"s": "5"}, timeout=30,
                     headers={"x-request-id": "late-1"})
    assert late.status_code == 504 and late.headers.get("x-request-id") == "late-1"
    # The proxy's own answer to a request that came without an id makes one.
    made = httpx.get(proxy.url + "/slow", params={"s": "5"}, timeout=30)
    assert made.status_code == 504 and len(made.headers.get("x-request-id", "")) >= 16


def test_replica_killed_under_load_and_controller_down(served_by, sqlite_fleet) -> None:
    client, start_proxy = served_by
    fleet = sqlite_fleet
    client.deploy(app_spec("Slow", "echo_app:Slow", "/slow", 2, max_ongoing_requests=4))
    wait_for(lambda: all_healthy(client, 1), what="healthy")
    proxy = start_proxy()
    wait_for(lambda: routed(proxy, "/slow?s=0"), 30, "route at the proxy")
    victim = next(r for r in client.replicas() if r.state == replica_pb2.REPLICA_STATE_RUNNING)

    async def load(total: int, kill_at: int) -> tuple[int, list[str]]:
        ok, failures = 0, []
        sem = asyncio.Semaphore(4)

        async def one(i: int, http: httpx.AsyncClient) -> None:
            nonlocal ok
            async with sem:
                if i == kill_at:
                    os.kill(int(victim.record.handle.split(":")[0]), signal.SIGKILL)
                try:
                    reply = await http.get(proxy.url + "/slow", params={"s": "0.02"})
                except httpx.HTTPError as e:
                    # The replica died while its answer streamed through: the
                    # proxy can only cut the connection (the status was sent).
                    failures.append(f"{type(e).__name__}: {e}")
                    return
                if reply.status_code == 200:
                    ok += 1
                else:
                    failures.append(f"{reply.status_code} {reply.text[:80]}")

        async with httpx.AsyncClient(timeout=30) as http:
            await asyncio.gather(*[one(i, http) for i in range(total)])
        return ok, failures

    ok, failures = asyncio.run(load(300, 100))
    print(f"replica SIGKILLed under load: {ok} ok, {len(failures)} failed: {failures}")
    # Only requests the dead replica had already received may fail (at most its
    # 4 in flight); every other one was retried elsewhere.
    assert len(failures) <= 4 and ok + len(failures) == 300

    # With no controller at all, the proxy keeps serving what it last knew.
    for proc in fleet.started:
        proc.kill()
    for _ in range(20):
        assert httpx.get(proxy.url + "/slow", params={"s": "0"}, timeout=10).status_code == 200
    fleet.start(1, runtime="process")  # a controller again, to shut the replicas down
    fleet.leader()


def echo(version: str, label: str) -> d.DeploymentSpec:
    spec = app_spec("Echo", "echo_app:Echo", "/echo", 3)
    spec.version = version
    spec.init_kwargs_json = json.dumps({"label": label})
    return spec


# With a second test worker's load, the HAProxy engine's runtime-API update
# once lagged a draining replica's refusals past its retries (HAProxy cannot
# wait for the next replica set as the Python path does). The controller now
# drains a replica only once the proxies say they let go of it (drain_fence.py;
# test_haproxy_engine stops the proxy through a rollout).
def test_rolling_update_under_load_through_the_proxy(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(echo("v1", "one"))
    wait_for(lambda: all_healthy(client, 1), what="v1 healthy")
    proxy = start_proxy()
    wait_for(lambda: routed(proxy, "/echo"), 30, "route at the proxy")
    with SteadyLoad(proxy.url + "/echo") as load:
        wait_for(lambda: load.ok > 50, what="traffic before the rollout")
        client.deploy(echo("v2", "two"))

        def rolled() -> bool:
            deps = [dep for app in client.status().applications for dep in app.deployments]
            return bool(deps) and deps[0].version == "v2" and \
                deps[0].status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
        wait_for(rolled, 90, "rollout to v2")
        at_end = load.ok
        wait_for(lambda: load.ok > at_end + 50, what="traffic after the rollout")
    print(f"rolling update through the proxy: {load.ok} ok, {len(load.bad)} not 2xx")
    assert load.bad == [], load.bad[:5]
    assert load.labels == {"one", "two"}


def test_scale_down_under_load_fails_no_request(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(echo("v1", "one"))  # 3 replicas
    wait_for(lambda: all_healthy(client, 1), what="3 replicas healthy")
    proxy = start_proxy()
    wait_for(lambda: routed(proxy, "/echo"), 30, "route at the proxy")

    def running() -> int:
        return len([r for r in client.replicas() if r.state == replica_pb2.REPLICA_STATE_RUNNING])
    with SteadyLoad(proxy.url + "/echo") as load:
        wait_for(lambda: load.ok > 50, what="traffic before scaling down")
        spec = echo("v1", "one")
        spec.replica_config.num_replicas = 1
        client.deploy(spec)
        wait_for(lambda: running() == 1 and len(client.replicas()) == 1, 60, "1 replica left")
        at_end = load.ok
        wait_for(lambda: load.ok > at_end + 50, what="traffic after scaling down")
    assert load.bad == [], load.bad[:5]

def test_proxy_drains_on_sigterm(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(app_spec("Slow", "echo_app:Slow", "/slow", 1))
    wait_for(lambda: all_healthy(client, 1), what="healthy")
    proxy = start_proxy()
    wait_for(lambda: routed(proxy, "/slow?s=0"), 30, "route at the proxy")

    async def in_flight_then_term() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as http:
            calls = [asyncio.create_task(http.get(proxy.url + "/slow", params={"s": "1.5"}))
                     for _ in range(3)]
            await asyncio.sleep(0.5)
            assert proxy.proc is not None
            proxy.proc.send_signal(signal.SIGTERM)
            return [(await c).status_code for c in calls]

    assert asyncio.run(in_flight_then_term()) == [200, 200, 200]
    assert proxy.proc.wait(20) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(proxy.url + "/-/healthz", timeout=2)


def test_proxy_follows_a_new_leader(etcd_fleet, tmp_path) -> None:
    etcd_fleet.start(2, runtime="process", lease_ttl=2)
    leader = etcd_fleet.leader()
    proxy = ProxyProcess(etcd_fleet.addresses(), log_dir=tmp_path).start()
    try:
        with ControllerClient(etcd_fleet.addresses(), timeout=30) as client:
            client.deploy(app_spec("Hello", "echo_app:hello", "/hello"))
            wait_for(lambda: routed(proxy, "/hello"), 60, "first route")
            leader.kill()
            etcd_fleet.leader(timeout=30)
            client.deploy(app_spec("Numbers", "echo_app:numbers", "/numbers"))
            wait_for(lambda: routed(proxy, "/numbers"), 60, "a route from the new leader")
            assert httpx.get(proxy.url + "/hello").text == "hello world"
            client.shutdown()
    finally:
        proxy.stop()


def test_proxies_report_queued_requests(served_by) -> None:
    client, start_proxy = served_by
    client.deploy(app_spec("Slow", "echo_app:Slow", "/slow", 1, max_ongoing_requests=1))
    wait_for(lambda: all_healthy(client, 1), what="healthy")
    proxy = start_proxy()
    wait_for(lambda: routed(proxy, "/slow?s=0"), 30, "route at the proxy")

    def queued() -> int:
        return next(dep.queued_requests for app in client.status().applications
                    for dep in app.deployments)

    async def pile_up() -> int:
        async with httpx.AsyncClient(timeout=60) as http:
            calls = [asyncio.create_task(http.get(proxy.url + "/slow", params={"s": "1"}))
                     for _ in range(6)]
            seen = await asyncio.to_thread(wait_for, lambda: (n := queued()) >= 3 and n, 20,
                                           "queued requests in the status")
            await asyncio.gather(*calls)
            return seen

    assert asyncio.run(pile_up()) >= 3
    wait_for(lambda: queued() == 0, 20, "the queue to be reported empty")


def test_client_disconnect_and_timeout_cancel_at_the_replica(served_by, tmp_path) -> None:
    client, start_proxy = served_by
    spec = app_spec("Sleeper", "echo_app:Sleeper", "/sleep", 1)
    spec.init_kwargs_json = json.dumps({"marks": str(tmp_path)})
    client.deploy(spec)
    wait_for(lambda: all_healthy(client, 1), what="healthy")
    proxy = start_proxy("--request-timeout-s", "1")
    wait_for(lambda: routed(proxy, "/sleep?s=0"), 30, "route at the proxy")

    with pytest.raises(httpx.ReadTimeout):  # the client gives up and disconnects
        httpx.get(proxy.url + "/sleep", params={"s": "30"}, timeout=0.3,
                  headers={"x-request-id": "left"})
    wait_for(lambda: (tmp_path / "left").exists(), 10, "the replica to cancel")

    timed_out = httpx.get(proxy.url + "/sleep", params={"s": "30"}, timeout=10,
                          headers={"x-request-id": "late"})
    assert timed_out.status_code == 504
    wait_for(lambda: (tmp_path / "late").exists(), 10, "the replica to cancel on timeout")
