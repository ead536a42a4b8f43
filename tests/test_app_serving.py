"""Applications served for real: FastAPI under a prefix, traffic split and shadow,
and `servefleet deploy --wait` / `status` / `config` / `delete` (real processes)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
APPS = str(ROOT / "tests" / "apps")
EXAMPLES = str(ROOT / "examples")


def running(client: ControllerClient, name: str) -> bool:
    info = client.application_status(name)
    return info is not None and info.status == status_pb2.APPLICATION_STATUS_RUNNING


@pytest.fixture
def served_apps(sqlite_fleet, tmp_path):
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path).start()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        yield client, proxy, sqlite_fleet.addresses()[0]
        proxy.stop()
        client.shutdown()


def test_fastapi_routes_under_the_application_prefix(served_apps) -> None:
    client, proxy, _ = served_apps
    client.deploy_applications([apb.ApplicationSpec(
        name="api", route_prefix="/api", import_path="fastapi_app:app",
        runtime=dpb.RuntimeOptions(working_dir=EXAMPLES))])
    wait_for(lambda: running(client, "api"), 60, "api RUNNING")
    base = proxy.url + "/api"
    wait_for(lambda: httpx.get(base + "/").status_code == 200, 30, "the route at the proxy")
    assert httpx.get(base + "/").json() == {"hello": "from FastAPI", "root_path": "/api"}
    assert httpx.get(base).json()["root_path"] == "/api"  # the prefix itself is the app's /
    assert httpx.get(base + "/items/3", params={"q": "x"}).json() == {"item_id": 3, "q": "x"}
    assert httpx.post(base + "/echo", json={"a": 1}).json() == {"received": {"a": 1}}
    assert httpx.get(base + "/items/notanint").status_code == 422  # FastAPI's own validation
    assert httpx.get(base + "/nowhere").status_code == 404

    async def chat() -> list[str | bytes]:  # the example's WebSocket, through the proxy
        from websockets.asyncio.client import connect

        async with connect(proxy.url.replace("http://", "ws://") + "/api/chat") as ws:
            answers = []
            for text in ("hello", "again"):
                await ws.send(text)
                answers.append(await ws.recv())
            return answers
    assert asyncio.run(chat()) == ["echo: hello", "echo: again"]


def test_the_cluster_request_timeout_reaches_the_proxy(served_apps) -> None:
    client, proxy, _ = served_apps
    client.deploy_applications(
        [apb.ApplicationSpec(name="sleepy", route_prefix="/sleepy",
                             import_path="graph_app:sleepy",
                             runtime=dpb.RuntimeOptions(working_dir=APPS))],
        http_options=apb.HttpOptions(request_timeout_s=1.0))
    wait_for(lambda: running(client, "sleepy"), 60, "sleepy RUNNING")
    url = proxy.url + "/sleepy"
    wait_for(lambda: httpx.get(url).status_code == 200, 30, "the route at the proxy")
    slow = httpx.get(url, params={"s": "5"}, timeout=10)
    assert slow.status_code == 504 and "within 1s" in slow.text
    assert client.applications().http_options.request_timeout_s == 1.0


def test_traffic_split_by_weight_and_a_shadow_that_only_gets_copies(served_apps, tmp_path) -> None:
    client, proxy, _ = served_apps
    marks = tmp_path / "shadow-marks"
    marks.mkdir()
    spec = apb.ApplicationSpec(name="ab", route_prefix="/ab", import_path="traffic_app:build",
                               args_json=json.dumps({"marks_dir": str(marks)}),
                               runtime=dpb.RuntimeOptions(working_dir=APPS))
    client.deploy_applications([spec])
    wait_for(lambda: running(client, "ab"), 60, "ab RUNNING")
    url = proxy.url + "/ab"
    wait_for(lambda: httpx.get(url).status_code == 200, 30, "the route at the proxy")

    client.set_traffic("ab", apb.TrafficPolicy(
        split=[apb.WeightedDeployment(deployment="Primary", weight=70),
               apb.WeightedDeployment(deployment="Canary", weight=30)],
        shadow=apb.ShadowTarget(deployment="Shadow", fraction=0.2)))
    wait_for(lambda: any(httpx.get(url).json()["label"] == "canary" for _ in range(20)), 30,
             "the split at the proxy")
    for mark in marks.iterdir():
        mark.unlink()

    total = 2000
    with httpx.Client() as http, ThreadPoolExecutor(8) as pool:
        labels = Counter(pool.map(lambda _: http.get(url).json()["label"], range(total)))
    print(f"split over {total} requests: {dict(labels)}")
    assert set(labels) == {"primary", "canary"}, "the shadow's answers must never be seen"
    assert abs(labels["canary"] / total - 0.30) <= 0.05
    copies = wait_for(lambda: _settled(marks), 30, "shadow copies to finish")
    print(f"shadow copies: {copies} of {total}")
    assert abs(copies / total - 0.20) <= 0.05

    # A policy naming a deployment the application lacks is refused.
    from servefleet.client import ControllerError
    with pytest.raises(ControllerError, match="has no deployment 'Nope'"):
        client.set_traffic("ab", apb.TrafficPolicy(split=[
            apb.WeightedDeployment(deployment="Nope", weight=1)]))


_last: dict[str, int] = {}


def _settled(marks: Path) -> int | None:
    count = len(os.listdir(marks))
    previous, _last[str(marks)] = _last.get(str(marks)), count
    return count if previous == count else None


def servefleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servefleet", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_cli_deploys_shows_and_deletes_a_config(served_apps, tmp_path) -> None:
    client, proxy, address = served_apps
    config = tmp_path / "serve.yaml"
    config.write_text(f"""
applications:
  - name: calc
    route_prefix: /calc
    import_path: graph_app:app
    runtime: {{working_dir: {APPS}}}
    deployments:
      - {{name: Adder, num_replicas: 1, user_config: {{scale: 2}}}}
""")
    deployed = servefleet("deploy", str(config), "--wait", "--controller", address)
    assert deployed.returncode == 0, deployed.stderr
    assert "calc: deploying" in deployed.stdout and "calc: RUNNING" in deployed.stdout
    wait_for(lambda: httpx.get(proxy.url + "/calc", params={"x": 1}).status_code == 200, 30)
    assert httpx.get(proxy.url + "/calc", params={"x": 1}).json()["call"] == 22

    status = json.loads(servefleet("status", "--json", "--controller", address).stdout)
    (calc,) = [a for a in status["applications"] if a["name"] == "calc"]
    assert calc["status"] == "RUNNING"
    assert {d["name"] for d in calc["deployments"]} == {"Adder", "Front"}
    shown = servefleet("config", "--controller", address)
    assert "name: calc" in shown.stdout and "scale: 2" in shown.stdout

    bad = tmp_path / "bad.yaml"
    bad.write_text("applications: [{name: calc, import_path: graph_app:app, replicas: 2}]\n")
    refused = servefleet("deploy", str(bad), "--controller", address)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"{bad}: applications[0].replicas: unknown key" in refused.stderr
    assert running(client, "calc")  # nothing changed

    failing = tmp_path / "failing.yaml"
    failing.write_text("applications: [{name: broken, route_prefix: /b, "
                       "import_path: no_such_module:app}]\n")
    planned = servefleet("deploy", str(failing), "--dry-run", "--controller", address)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines() == ["broken: would deploy",
                                           f"calc: would be deleted (not in {failing})"]
    assert running(client, "calc") and client.application_status("broken") is None
    failed = servefleet("deploy", str(failing), "--wait", "--controller", address)
    assert failed.returncode == 1 and "No module named 'no_such_module'" in failed.stderr
    # The deletion is named before anything is deployed.
    assert failed.stdout.splitlines()[:2] == [f"calc: deleting (not in {failing})",
                                              "broken: deploying"]

    gone = servefleet("delete", "broken", "ghost", "--controller", address)
    assert gone.stdout.splitlines() == ["deleted broken", "ghost: not found, nothing to delete"]
    wait_for(lambda: not client.applications().applications, 30, "no applications left")


HELLO = """
from servefleet import deployment


@deployment(graceful_shutdown_wait_loop_s=0.1)
def Hello(request):
    return "{word}"


app = Hello.bind()
"""


def test_edited_code_rolls_out_and_an_unchanged_tree_is_unchanged(served_apps,
                                                                   tmp_path) -> None:
    _, proxy, address = served_apps
    code = tmp_path / "code"
    code.mkdir()
    (code / "hello_app.py").write_text(HELLO.format(word="one"))
    config = tmp_path / "serve.yaml"
    config.write_text("applications:\n"
                      "  - {name: hello, route_prefix: /hello, import_path: hello_app:app,\n"
                      "     runtime: {working_dir: code, excludes: [logs/]}}\n")

    def deploy() -> list[str]:
        done = servefleet("deploy", str(config), "--wait", "--controller", address)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    def answer() -> str:
        return httpx.get(proxy.url + "/hello").text

    assert deploy()[0] == "hello: deploying"
    wait_for(lambda: answer() == "one", 30, "the first code to serve")
    (code / "logs").mkdir()
    (code / "logs" / "today.log").write_text("excluded\n")
    assert deploy()[0] == "hello: unchanged"  # __pycache__ and logs/ are not code
    (code / "hello_app.py").write_text(HELLO.format(word="two"))
    assert deploy()[0] == "hello: deploying"
    wait_for(lambda: answer() == "two", 30, "the edited code to serve")
    assert deploy()[0] == "hello: unchanged"


COUNTER = """
from servefleet import deployment


@deployment(graceful_shutdown_wait_loop_s=0.1)
class Counter:
    def __init__(self):
        self.count = 0
        self.reconfigured = 0

    def reconfigure(self, config):
        self.step = config["step"]
        self.reconfigured += 1

    def __call__(self, request):
        self.count += self.step
        return {"count": self.count, "step": self.step, "reconfigured": self.reconfigured}


app = Counter.bind()
"""


def test_editing_user_config_beside_the_code_reconfigures_in_place(served_apps,
                                                                     tmp_path) -> None:
    """The README's layout: the config file in the working dir it names. Its
    user_config edits are applied to the running replicas, which keep their state."""
    client, proxy, address = served_apps
    project = tmp_path / "project"  # tmp_path itself holds the store and logs
    project.mkdir()
    (project / "counter.py").write_text(COUNTER)
    (project / "README.md").write_text("# my counter\n")
    config = project / "config.yaml"
    layout = ("applications:\n"
              "  - name: counter\n"
              "    route_prefix: /counter\n"
              "    import_path: counter:app\n"
              "    runtime: {working_dir: .}\n"
              "    deployments:\n"
              "      - {name: Counter, num_replicas: 1, user_config: {step: STEP}}\n")
    config.write_text(layout.replace("STEP", "1"))
    done = servefleet("deploy", str(config), "--wait", "--controller", address)
    assert done.returncode == 0, done.stderr
    wait_for(lambda: httpx.get(proxy.url + "/counter").status_code == 200, 30, "the route")
    counted = httpx.get(proxy.url + "/counter").json()["count"]
    before = [r.record.replica_id for r in client.replicas("counter")]

    config.write_text(layout.replace("STEP", "100"))
    (project / "README.md").write_text("# my counter, documented\n")
    done = servefleet("deploy", str(config), "--wait", "--controller", address)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "counter: deploying"  # its spec changed
    wait_for(lambda: httpx.get(proxy.url + "/counter").json()["step"] == 100, 30,
             "the new user_config to reach the replica")
    answer = httpx.get(proxy.url + "/counter").json()
    assert answer["reconfigured"] == 2  # once at start, once for the edit
    assert answer["count"] % 100 == counted < 100  # counted on from before the edit
    assert [r.record.replica_id for r in client.replicas("counter")] == before


def test_the_sdk_example_deploys_from_any_directory(served_apps, tmp_path) -> None:
    """examples/deploy_sentiment.py, the README's SDK example as a script, run
    from a directory that is not the repository's."""
    _, proxy, address = served_apps
    done = subprocess.run([sys.executable, os.path.join(EXAMPLES, "deploy_sentiment.py"),
                           "--controller", address], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "running; each replica can also be asked directly" in done.stdout
    wait_for(lambda: httpx.get(proxy.url + "/sentiment",
                               params={"text": "a great day"}).status_code == 200, 30)
    assert httpx.get(proxy.url + "/sentiment", params={"text": "a great day"}).json()[
        "label"] == "positive"
