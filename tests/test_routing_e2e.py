"""Request routers through real processes: a deployment's `request_router`
reaches proxies and handles by the Watch stream; prefix affinity keeps
conversations on their replica (through a proxy and through handles) and
moves them off a slow one; a change of router reaches callers without new
replicas; a user's router class is used by a proxy that allows its module
(also one `servefleet up` started) and by handles, and refused (power of
two instead) by a proxy that does not."""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import httpx
import pytest

from servefleet import get_deployment_handle
from servefleet._private.testing import (
    ControllerProcess,
    ProxyProcess,
    free_port,
    stop_cluster,
    wait_for,
)
from servefleet.client import ControllerClient, ControllerError
from servefleet.v1 import application_pb2 as a
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

APPS = str(Path(__file__).parent / "apps")
RUNNING = replica_pb2.REPLICA_STATE_RUNNING


def spec(name: str, import_path: str, route: str, replicas: int, router: str,
         kwargs: dict | None = None, env: dict | None = None) -> d.DeploymentSpec:
    return d.DeploymentSpec(
        name=name, import_path=import_path, route_prefix=route,
        runtime=d.RuntimeOptions(working_dir=APPS, env=env or {}),
        replica_config=d.ReplicaConfig(num_replicas=replicas, max_ongoing_requests=64,
                                       request_router=router,
                                       request_router_kwargs_json=json.dumps(kwargs or {})))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("routing")
    os.environ["PYTHONPATH"] = APPS  # the proxies import my_routers from here
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", log_dir=tmp,
                                   extra_args=["--allow-working-dir", "/"]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp,
                         extra_args=["--allow-router-module", "my_routers"]).start()
    client = ControllerClient([controller.address], timeout=30)
    try:
        yield tmp, controller, proxy, client
    finally:
        os.environ.pop("PYTHONPATH", None)
        stop_cluster(controller, client, [proxy])


def running(client: ControllerClient, name: str, count: int) -> bool:
    return sum(r.state == RUNNING for r in client.replicas(deployment=name)) == count


def test_prefix_affinity_keeps_conversations_and_moves_them_off_a_slow_replica(
        cluster) -> None:
    tmp, _, proxy, client = cluster
    slow = tmp / "slow"
    client.deploy(spec("Routed", "routed_app:Routed", "/direct", 3, "prefix_affinity",
                       {"imbalance_threshold": 2}, {"ROUTED_SLOW_FILE": str(slow)}))
    wait_for(lambda: running(client, "Routed", 3), 60, "3 replicas")
    url = proxy.url + "/direct"
    wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
    talks = {c: f"User {c}: tell me of the days of Noah." for c in range(30)}
    seen: dict[int, list[str]] = collections.defaultdict(list)
    with httpx.Client(timeout=30) as http:
        def turn(c: int) -> str:
            talks[c] += f" Assistant: an answer to turn {len(seen[c])}. User: and then?"
            return http.get(url, headers={"x-servefleet-routing-key": talks[c]}).json()[
                "replica"]
        for _ in range(5):
            for c in talks:
                seen[c].append(turn(c))
        stuck = sum(t == s[0] for s in seen.values() for t in s)
        assert stuck >= 0.9 * 150, seen
        assert len({s[0] for s in seen.values()}) == 3  # new conversations spread out
        # One replica slow: under concurrent turns its conversations move.
        victim = collections.Counter(s[0] for s in seen.values()).most_common(1)[0][0]
        slow.write_text(victim)
        with concurrent.futures.ThreadPoolExecutor(30) as pool:
            rounds = [list(pool.map(turn, talks)) for _ in range(3)]
    owned = [c for c, s in seen.items() if s[0] == victim]
    last = [rounds[-1][c] for c in owned]
    assert sum(r != victim for r in last) >= len(owned) // 2, (owned, rounds)


def test_a_users_router_in_the_proxy_that_allows_it_and_in_handles(cluster, tmp_path,
                                                                   monkeypatch) -> None:
    _, controller, proxy, client = cluster
    note = tmp_path / "calls"
    client.deploy(spec("Lowest", "routed_app:Routed", "/lowest", 3, "my_routers:Lowest",
                       {"note": str(note)}))
    wait_for(lambda: running(client, "Lowest", 3), 60, "3 replicas")
    lowest = min(r.record.replica_id for r in client.replicas(deployment="Lowest")
                 if r.state == RUNNING)
    url = proxy.url + "/lowest"
    wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
    answers = {httpx.get(url, headers={"x-servefleet-routing-key": f"k{i}"},
                         timeout=10).json()["replica"] for i in range(12)}
    assert answers == {lowest}
    assert f"{proxy.proc.pid} k3" in note.read_text()  # the proxy ran the user's class
    monkeypatch.syspath_prepend(APPS)  # this process's handles load it too
    handle = get_deployment_handle("Lowest", "default", controllers=controller.address)
    got = {handle.options(method_name="whoami", routing_key="h").remote().result(
        timeout_s=30)["replica"] for _ in range(6)}
    assert got == {lowest} and f"{os.getpid()} h" in note.read_text()
    # A proxy whose operator did not allow the module: power of two, and why.
    other = ProxyProcess([controller.address], log_dir=tmp_path).start()
    try:
        wait_for(lambda: httpx.get(other.url + "/lowest", timeout=5).status_code == 200, 30,
                 "the route on the other proxy")
        spread = {httpx.get(other.url + "/lowest", timeout=10).json()["replica"]
                  for _ in range(40)}
        assert len(spread) > 1
        refusals = [line for line in other.log_path.read_text().splitlines()
                    if "my_routers:Lowest cannot be used" in line]
        assert len(refusals) == 1 and "--allow-router-module" in refusals[0], refusals
    finally:
        other.stop()


def test_handles_in_a_replica_load_a_router_from_the_working_dir(cluster, tmp_path) -> None:
    """An ingress replica's handle loads the routed deployment's router from
    the application's working_dir, under a module name nowhere else."""
    _, _, proxy, client = cluster
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(Path(APPS) / "routed_app.py", work / "routed_app.py")
    shutil.copy(Path(APPS) / "my_routers.py", work / "wd_routers.py")
    note = tmp_path / "calls"
    client.deploy_applications([a.ApplicationSpec(
        name="relay", route_prefix="/relay", import_path="routed_app:app",
        runtime=d.RuntimeOptions(working_dir=str(work)),
        deployments=[a.DeploymentOverride(name="Routed", replica_config=d.ReplicaConfig(
            num_replicas=3, request_router="wd_routers:Lowest",
            request_router_kwargs_json=json.dumps({"note": str(note)})))])])
    wait_for(lambda: sum(r.state == RUNNING for r in client.replicas("relay", "Routed")) == 3,
             60, "3 replicas")
    lowest = min(r.record.replica_id for r in client.replicas("relay", "Routed"))
    url = proxy.url + "/relay"
    wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
    answers = {httpx.get(url, params={"key": f"w{i}"}, timeout=10).json()["replica"]
               for i in range(12)}
    assert answers == {lowest}
    callers = {line.split()[0] for line in note.read_text().splitlines() if " w" in line}
    assert callers and str(proxy.proc.pid) not in callers and str(os.getpid()) not in callers
    client.delete_applications(["relay"])


def test_a_bad_router_option_is_refused_naming_it(cluster) -> None:
    _, _, _, client = cluster
    for router, kwargs, field in (("not a class path", "{}", "request_router"),
                                  ("prefix_affinity", "[1]", "request_router_kwargs_json")):
        bad = spec("Bad", "routed_app:Routed", "/bad", 1, router)
        bad.replica_config.request_router_kwargs_json = kwargs
        with pytest.raises(ControllerError) as refused:
            client.deploy(bad)
        assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
        assert field in str(refused.value)
    # A bad change to a deployment changes nothing of it.
    client.deploy(spec("Kept", "routed_app:Routed", "/kept", 1, "prefix_affinity",
                       {"imbalance_threshold": 2}))
    bad = spec("Kept", "routed_app:Routed", "/kept", 1, "prefix_affinity")
    bad.replica_config.request_router_kwargs_json = "not json"
    with pytest.raises(ControllerError) as refused:
        client.deploy(bad)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "request_router_kwargs_json" in str(refused.value)
    kept = client.get("Kept").spec.replica_config
    assert (kept.request_router, json.loads(kept.request_router_kwargs_json)) == (
        "prefix_affinity", {"imbalance_threshold": 2})
    client.delete(["Kept"])
    assert not [a for a in client.status().applications
                if any(dep.name == "Bad" for dep in a.deployments)]


def test_handles_keep_conversations_and_a_new_router_needs_no_new_replicas(
        cluster, monkeypatch) -> None:
    _, controller, proxy, client = cluster
    client.deploy(spec("Chat", "routed_app:Routed", "/chat", 3, "prefix_affinity"))
    wait_for(lambda: running(client, "Chat", 3), 60, "3 replicas")
    handle = get_deployment_handle("Chat", "default", controllers=controller.address)

    def turn(key: str) -> str:
        return handle.options(method_name="whoami", routing_key=key).remote().result(
            timeout_s=30)["replica"]

    talks = {c: f"User {c}: who begat whom?" for c in range(30)}
    seen: dict[int, list[str]] = collections.defaultdict(list)
    for t in range(5):
        for c in talks:
            talks[c] += f" Assistant: answer {t}. User: and then?"
            seen[c].append(turn(talks[c]))
    assert sum(r == s[0] for s in seen.values() for r in s) >= 0.9 * 150, seen
    assert len({s[0] for s in seen.values()}) == 3
    # Another router, by redeploying: the same replicas, routed the new way.
    before = {r.record.replica_id for r in client.replicas(deployment="Chat")}
    monkeypatch.syspath_prepend(APPS)  # this process's handles load my_routers
    client.deploy(spec("Chat", "routed_app:Routed", "/chat", 3, "my_routers:Lowest"))
    lowest = min(before)
    wait_for(lambda: {turn(f"k{i}") for i in range(6)} == {lowest}, 30, "the new router")
    answers = {httpx.get(proxy.url + "/chat", timeout=10).json()["replica"]
               for _ in range(12)}
    assert answers == {lowest}
    assert {r.record.replica_id for r in client.replicas(deployment="Chat")} == before


def test_up_passes_the_router_allow_list_to_its_proxy(tmp_path) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"""
applications:
  - name: lowest
    route_prefix: /lowest
    import_path: routed_app:Routed
    runtime: {{working_dir: {APPS}}}
    deployments:
      - {{name: Routed, num_replicas: 3, request_router: "my_routers:Lowest"}}
""")
    http = f"127.0.0.1:{free_port()}"
    log = (tmp_path / "up.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "servefleet", "up", str(config), "--state-dir",
         str(tmp_path / "state"), "--http", http, "--listen", f"127.0.0.1:{free_port()}",
         "--dashboard", "off", "--allow-router-module", "my_routers"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": APPS})
    try:
        wait_for(lambda: "ready" in (tmp_path / "up.log").read_text()
                 or proc.poll() is not None, 120, "up to be ready")
        assert proc.poll() is None, (tmp_path / "up.log").read_text()[-3000:]
        answers = {httpx.get(f"http://{http}/lowest", timeout=10).json()["replica"]
                   for _ in range(12)}
        assert len(answers) == 1, answers  # power of two would spread them
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
        log.close()
    assert "Traceback" not in (tmp_path / "up.log").read_text()
