"""Ray Serve's REST API on a real controller (processes, HTTP on loopback):
config files written as Ray documents them PUT and served through a proxy,
declarative replacement, DELETE, refusals that change nothing, roles, and a
standby's answer."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml

from servefleet._private.security import tokens
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port, wait_for
from servefleet.client import ControllerClient
from servefleet.controller.api import rest_openapi
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = pytest.mark.slow
TESTS = Path(__file__).parent
APPS = str(TESTS / "apps")
PATH = "/api/serve/applications/"
DETAILS = jsonschema.Draft202012Validator({
    "$ref": "#/components/schemas/ServeInstanceDetails",
    "components": json.loads(rest_openapi.document_bytes())["components"]})
SECRET = "sk-live-8e7d6c5b4a"


def ray_config(name: str) -> dict[str, Any]:
    """tests/rest_configs/NAME as JSON, its working dirs made absolute (Ray's
    docs point them at a zip URL, which servefleet does not fetch)."""
    data = yaml.safe_load((TESTS / "rest_configs" / name).read_text())
    for app in data["applications"]:
        app["runtime_env"]["working_dir"] = APPS
    return data


def details(base: str, **kwargs: Any) -> dict[str, Any]:
    answer = httpx.get(base + PATH, timeout=10, **kwargs)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
              for e in DETAILS.iter_errors(body)]
    assert errors == [], errors
    return body


def running(base: str, names: set[str]) -> dict[str, Any] | None:
    body = details(base)
    apps = body["applications"]
    if set(apps) == names and all(a["status"] == "RUNNING" for a in apps.values()):
        return body
    return None


@pytest.fixture
def cluster_http(tmp_path: Path, cluster: str):
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(
        f"sqlite://{tmp_path}/state.db", cluster=cluster, log_dir=tmp_path,
        extra_args=["--metrics-listen", http, "--allow-working-dir", APPS]).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp_path)
    try:
        proxy.start()
        yield controller, f"http://{http}", proxy
    finally:
        proxy.stop()
        with contextlib.suppress(Exception), ControllerClient([controller.address],
                                                              timeout=10) as client:
            client.shutdown()
        controller.stop()


def test_ray_config_files_put_served_replaced_and_deleted(cluster_http) -> None:
    controller, base, proxy = cluster_http
    first = ray_config("ray_multi_app.yaml")
    put = httpx.put(base + PATH, json=first, timeout=30)
    assert (put.status_code, put.content) == (200, b""), put.text  # Ray's answer
    body = wait_for(lambda: running(base, {"doubler", "adder"}), 120, "both applications")
    wait_for(lambda: httpx.get(proxy.url + "/double?x=21").status_code == 200, 30, "the route")
    assert httpx.get(proxy.url + "/double?x=21").json() == {"doubled": 42}
    assert httpx.get(proxy.url + "/add?x=1").json()["label"] == "from-rest"

    assert body["deploy_mode"] == "MULTI_APP" and body["http_options"]["port"] == 8000
    adder = body["applications"]["adder"]
    assert (adder["route_prefix"], adder["source"]) == ("/add", "declarative")
    assert adder["deployed_app_config"]["args"] == {"increment": 5, "label": "from-rest"}
    assert adder["deployed_app_config"]["runtime"]["env"] == {"GREETING": "hi"}
    dep = adder["deployments"]["Adder"]
    assert dep["deployment_config"]["user_config"] == {"scale": 2}
    assert (dep["status"], dep["target_num_replicas"]) == ("HEALTHY", 1)
    (replica,) = dep["replicas"]
    assert replica["state"] == "RUNNING" and replica["pid"] > 0
    assert set(body["applications"]["doubler"]["deployments"]) == {"Doubler", "Ingress"}

    # Bad input: 400 naming the field, and nothing changes.
    broken = json.loads(json.dumps(first))
    broken["applications"][1]["deployments"][0]["num_replicas"] = "two"
    refused = httpx.put(base + PATH, json=broken, timeout=30)
    assert refused.status_code == 400
    assert "applications[1].deployments[0].num_replicas: expected an integer" in refused.text
    taken = ray_config("ray_autoscaling.yaml")
    taken["applications"][0]["route_prefix"] = "/alone"
    with ControllerClient([controller.address], timeout=30) as client:
        client.deploy(dpb.DeploymentSpec(
            name="Echo", application="alone", import_path="echo_app:Echo",
            route_prefix="/alone", runtime=dpb.RuntimeOptions(working_dir=APPS),
            replica_config=dpb.ReplicaConfig(num_replicas=1)))
    conflict = httpx.put(base + PATH, json=taken, timeout=30)
    assert conflict.status_code == 409 and "'/alone' is already served" in conflict.text
    after = details(base)["applications"]
    assert set(after) == {"doubler", "adder", "alone"}
    assert after["alone"]["source"] == "imperative"
    assert after["alone"]["deployed_app_config"] is None
    for name in ("doubler", "adder"):
        assert after[name]["last_deployed_time_s"] == \
            body["applications"][name]["last_deployed_time_s"]

    # Declarative: the second file's application replaces the first's two.
    put = httpx.put(base + PATH, json=ray_config("ray_autoscaling.yaml"), timeout=30)
    assert put.status_code == 200, put.text
    body = wait_for(lambda: running(base, {"scaled", "alone"}), 120, "the replacement")
    front = body["applications"]["scaled"]["deployments"]["Front"]
    assert front["deployment_config"]["autoscaling_config"]["max_replicas"] == 2
    assert httpx.get(proxy.url + "/scaled?x=1").status_code == 200
    assert httpx.get(proxy.url + "/double?x=1").status_code == 404

    # DELETE: every application, the one made of a lone deployment too.
    deleted = httpx.delete(base + PATH, timeout=30)
    assert (deleted.status_code, deleted.content) == (200, b"")
    wait_for(lambda: details(base)["applications"] == {}, 60, "nothing left")
    assert httpx.delete(base + PATH, timeout=30).status_code == 200  # idempotent


@pytest.fixture
def secured(tmp_path: Path, cluster: str):
    path = tmp_path / "tokens"
    issued = {role: tokens.create(path, f"{role}-1", role)
              for role in ("reader", "deployer", "admin")}
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(
        f"sqlite://{tmp_path}/state.db", cluster=cluster, log_dir=tmp_path, runtime="none",
        extra_args=["--auth-tokens", str(path), "--metrics-listen", http,
                    "--allow-working-dir", APPS])
    controller.start()
    try:
        yield controller, issued, f"http://{http}"
    finally:
        controller.stop()


def test_roles_as_over_grpc(secured) -> None:
    controller, issued, base = secured

    def call(method: str, role: str | None, body: Any = None) -> httpx.Response:
        headers = {"authorization": f"Bearer {issued[role]}"} if role else {}
        return httpx.request(method, base + PATH, headers=headers, json=body, timeout=30)

    with ControllerClient([controller.address], timeout=30,
                          credentials=Credentials(None, token=issued["deployer"])) as client:
        client.deploy(dpb.DeploymentSpec(
            name="Quotes", application="alone", import_path="echo_app:Echo",
            runtime=dpb.RuntimeOptions(working_dir=APPS, env={"API_KEY": SECRET}),
            replica_config=dpb.ReplicaConfig(num_replicas=1,
                                              user_config_json='{"password": "hunter22"}')))
    empty: dict[str, list[Any]] = {"applications": []}
    for method in ("GET", "PUT", "DELETE"):
        assert call(method, None, empty).status_code == 401, method
    assert httpx.get(base + PATH, timeout=10,
                     headers={"authorization": "Bearer nope"}).status_code == 401
    seen = call("GET", "reader")
    assert seen.status_code == 200
    assert SECRET not in seen.text and "hunter22" not in seen.text
    config = seen.json()["applications"]["alone"]["deployments"]["Quotes"]["deployment_config"]
    assert "user_config" not in config
    assert "hunter22" in call("GET", "deployer").text  # a deployer's own
    for method in ("PUT", "DELETE"):
        refused = call(method, "reader", empty)
        assert refused.status_code == 403 and "deployer or admin" in refused.text, method
    assert call("GET", "reader").json()["applications"]  # nothing changed
    # --runtime none builds no application: refused as a conflict, nothing written.
    one = {"applications": [{"name": "a", "import_path": "graph_app:app",
                             "runtime_env": {"working_dir": APPS}}]}
    refused = call("PUT", "deployer", one)
    assert refused.status_code == 409 and "runs no user code" in refused.text
    assert call("PUT", "deployer", empty).status_code == 200
    assert call("DELETE", "admin").status_code == 200
    wait_for(lambda: call("GET", "reader").json()["applications"] == {}, 30, "deleted")


def test_a_standby_answers_503_with_the_leader(etcd_url: str, cluster: str,
                                               tmp_path: Path) -> None:
    https = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    controllers = [ControllerProcess(etcd_url, cluster=cluster, runtime="none",
                                     log_dir=tmp_path,
                                     extra_args=["--metrics-listen", http]) for http in https]
    try:
        for controller in controllers:
            controller.start()
        deadline = time.monotonic() + 30
        while True:
            answers = [httpx.get(f"http://{h}{PATH}", timeout=10) for h in https]
            if sorted(a.status_code for a in answers) == [200, 503]:
                break
            assert time.monotonic() < deadline, [a.text for a in answers]
            time.sleep(0.2)
        leader = next(c for c, a in zip(controllers, answers, strict=True) if a.status_code == 200)
        standby = next(h for h, a in zip(https, answers, strict=True) if a.status_code == 503)
        for method in ("GET", "PUT", "DELETE"):
            answer = httpx.request(method, f"http://{standby}{PATH}", timeout=10,
                                   json={"applications": []})
            assert answer.status_code == 503, method
            assert answer.json() == {"standby": True, "leader": leader.address}
    finally:
        for controller in controllers:
            controller.stop()
