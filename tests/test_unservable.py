"""No request waits forever for a replica that cannot come (real processes).

A deployment that failed to deploy, or an application whose build failed, is
refused at once with 503 (HTTP), UNAVAILABLE (gRPC ingress) or a
DeploymentUnavailableError (a handle) naming the application, its status and
its last error; so is one with no replica up whose last start failed, while
the controller retries, and so are requests queued before the failure. A
deployment that calls such a deployment through a handle answers its own
callers 503 (UNAVAILABLE) with that error. Without a request timeout, a
request waits a bounded time for its answer to begin, and an answer that
began is not cut.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import pytest

from servefleet import get_deployment_handle
from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.serve.exceptions import DeploymentUnavailableError
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

ROOT = Path(__file__).resolve().parent.parent
APPS = str(ROOT / "tests" / "apps")
sys.path.insert(0, str(ROOT / "examples"))

from grpc_classifier import classifier_pb2 as pb  # noqa: E402
from grpc_classifier import classifier_pb2_grpc as pb_grpc  # noqa: E402

pytestmark = pytest.mark.slow
SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"


def broken(delay_s: float, replicas: int = 1, **kwargs) -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(
        name="Broken", application="broken", import_path="failing_app:Broken",
        init_kwargs_json=json.dumps({"delay_s": delay_s}), route_prefix="/broken",
        grpc_servicer_functions=[SERVICER], runtime=dpb.RuntimeOptions(working_dir=APPS),
        replica_config=dpb.ReplicaConfig(num_replicas=replicas, startup_timeout_s=20),
        **kwargs)


def deployment_status(client, app: str) -> int:
    """The status of the application's one deployment; -1 while it has none."""
    apps = {a.name: a for a in client.status().applications}
    return apps[app].deployments[0].status if app in apps and apps[app].deployments else -1


def timed(call):
    begun = time.monotonic()
    result = call()
    return result, time.monotonic() - begun


def grpc_refusal(target: str, app: str) -> grpc.RpcError:
    with grpc.insecure_channel(target) as channel, pytest.raises(grpc.RpcError) as raised:
        pb_grpc.ClassifierStub(channel).Predict(pb.PredictRequest(text="hi"),
                                                metadata=(("application", app),))
    return raised.value


def test_a_deployment_that_failed_to_deploy_is_refused_at_once(grpc_cluster, sqlite_fleet) -> None:
    client, proxy, grpc_target = grpc_cluster
    client.deploy(broken(delay_s=0.5, replicas=3))
    wait_for(lambda: "/broken" in httpx.get(proxy.url + "/-/routes").json(), 30, "the route")
    # Queued while its first replicas start: answered as soon as one failed,
    # not after the 9 failed starts the controller makes before it gives up.
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(httpx.get, proxy.url + "/broken", timeout=120).result(90)
    assert deployment_status(client, "broken") == status_pb2.DEPLOYMENT_STATUS_UPDATING
    assert answer.status_code == 503, answer.text
    assert "application broken cannot serve: deployment Broken is unavailable" in answer.text
    assert "RuntimeError: model file missing: weights.bin" in answer.text
    assert "keeps retrying" in answer.text and "Traceback" not in answer.text

    wait_for(lambda: deployment_status(client, "broken")
             == status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED, 90, "DEPLOY_FAILED")
    wait_for(lambda: "DEPLOY_FAILED" in httpx.get(proxy.url + "/broken", timeout=10).text, 30,
             "the refusal to say DEPLOY_FAILED")

    again, took = timed(lambda: httpx.get(proxy.url + "/broken", timeout=10))
    assert again.status_code == 503 and "model file missing" in again.text and took < 1.5

    refused, took = timed(lambda: grpc_refusal(grpc_target, "broken"))
    assert refused.code() == grpc.StatusCode.UNAVAILABLE and took < 1.5
    details = refused.details() or ""
    assert "DEPLOY_FAILED" in details and "model file missing" in details

    async def by_handle() -> DeploymentUnavailableError:
        with pytest.raises(DeploymentUnavailableError) as raised:
            await get_deployment_handle("Broken", "broken", sqlite_fleet.addresses()).remote()
        return raised.value
    error, took = timed(lambda: asyncio.run(by_handle()))
    assert error.status == 503 and "model file missing" in str(error) and took < 5

    # A deployment that can serve again serves: the refusal is lifted.
    client.deploy(dpb.DeploymentSpec(
        name="Broken", application="broken", import_path="echo_app:Echo",
        route_prefix="/broken", runtime=dpb.RuntimeOptions(working_dir=APPS),
        replica_config=dpb.ReplicaConfig(num_replicas=1)))
    wait_for(lambda: httpx.get(proxy.url + "/broken", timeout=10).status_code == 200, 60,
             "the fixed deployment to serve")


def test_a_deployment_calling_one_that_cannot_start_answers_that_it_is_unavailable(
        grpc_cluster, sqlite_fleet) -> None:
    """Not "500 error in user code: BackPressureError": the caller's code did
    nothing wrong and nothing was overloaded."""
    client, proxy, grpc_target = grpc_cluster
    client.deploy_applications([apb.ApplicationSpec(
        name=name, route_prefix=f"/{name}", import_path=f"failing_app:{path}",
        grpc_servicer_functions=[SERVICER] if name == "calling" else [],
        runtime=dpb.RuntimeOptions(working_dir=APPS))
        for name, path in [("calling", "caller"), ("api", "api_caller")]])
    wait_for(lambda: {"/calling", "/api"} <= set(httpx.get(proxy.url + "/-/routes").json()),
             60, "the routes")
    for name in ("calling", "api"):  # a class's __call__; a FastAPI route
        answer = httpx.get(proxy.url + f"/{name}", timeout=120)
        assert answer.status_code == 503, answer.text
        assert answer.text.startswith(f"DeploymentUnavailableError: application {name} cannot "
                                      "serve: deployment Broken is unavailable"), answer.text
        assert "RuntimeError: model file missing: weights.bin" in answer.text

    refused = grpc_refusal(grpc_target, "calling")
    assert refused.code() == grpc.StatusCode.UNAVAILABLE, refused.details()
    assert (refused.details() or "").startswith("DeploymentUnavailableError: ")
    assert "model file missing" in (refused.details() or "")

    async def by_handle() -> None:  # a handle of the driver's raises the same type
        await get_deployment_handle("Broken", "calling", sqlite_fleet.addresses()).remote()
    with pytest.raises(DeploymentUnavailableError, match="model file missing"):
        asyncio.run(by_handle())


def test_zero_replicas_without_autoscaling_is_refused_at_once(grpc_cluster) -> None:
    client, proxy, _ = grpc_cluster
    client.deploy(dpb.DeploymentSpec(
        name="Idle", application="idle", import_path="echo_app:Echo", route_prefix="/idle",
        runtime=dpb.RuntimeOptions(working_dir=APPS),
        replica_config=dpb.ReplicaConfig(num_replicas=0)))
    wait_for(lambda: "/idle" in httpx.get(proxy.url + "/-/routes").json(), 30, "the route")
    wait_for(lambda: httpx.get(proxy.url + "/idle", timeout=10).status_code == 503, 30,
             "a refusal")
    answer, took = timed(lambda: httpx.get(proxy.url + "/idle", timeout=10))
    assert "num_replicas 0" in answer.text and took < 1.5


def test_an_application_whose_build_failed_is_refused_at_once(grpc_cluster) -> None:
    client, proxy, grpc_target = grpc_cluster
    client.deploy_applications([apb.ApplicationSpec(
        name="unbuilt", route_prefix="/unbuilt", import_path="failing_app:Broken",
        grpc_servicer_functions=[SERVICER],
        runtime=dpb.RuntimeOptions(working_dir=APPS,
                                   env={"FAILING_APP_IMPORT_ERROR": "1"}))])
    wait_for(lambda: httpx.get(proxy.url + "/unbuilt", timeout=10).status_code == 503, 60,
             "the failed build's route")
    answer = httpx.get(proxy.url + "/unbuilt/any/path", timeout=10)
    assert answer.status_code == 503
    assert "application unbuilt is DEPLOY_FAILED: its build failed" in answer.text
    assert "ImportError: the build cannot import this" in answer.text
    refused = grpc_refusal(grpc_target, "unbuilt")
    assert refused.code() == grpc.StatusCode.UNAVAILABLE
    assert "its build failed" in (refused.details() or "")


def test_the_wait_for_an_answer_to_begin_is_bounded_and_a_stream_is_not_cut(
        grpc_cluster, sqlite_fleet, tmp_path) -> None:
    client, _, _ = grpc_cluster
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path,
                         extra_args=["--answer-start-timeout-s", "2"]).start()
    client.deploy(dpb.DeploymentSpec(
        name="Slow", application="slow", import_path="failing_app:Slow", route_prefix="/slow",
        runtime=dpb.RuntimeOptions(working_dir=APPS),
        replica_config=dpb.ReplicaConfig(num_replicas=1)))
    wait_for(lambda: httpx.get(proxy.url + "/slow", params={"s": 0}).status_code == 200, 60,
             "the deployment to serve")
    late, took = timed(lambda: httpx.get(proxy.url + "/slow", params={"s": 5}, timeout=30))
    assert late.status_code == 504 and "no answer within 2s" in late.text and took < 4.5
    streamed = httpx.get(proxy.url + "/slow", params={"s": 4, "stream": 1}, timeout=30)
    assert streamed.status_code == 200
    assert streamed.text == "".join(f"line {i}\n" for i in range(4))
    proxy.stop()


def cli(sqlite_fleet, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servefleet", *args,
                           "--controller", sqlite_fleet.addresses()[0]],
                          capture_output=True, text=True, timeout=180)


def broken_config(tmp_path: Path) -> Path:
    config = tmp_path / "broken.yaml"
    config.write_text("applications:\n"
                      "  - {name: broken, route_prefix: /broken, import_path: failing_app:app,\n"
                      f"     runtime: {{working_dir: {APPS}}}}}\n")
    return config


# What `deploy --wait` prints as starts fail, before it gives up.
FAILED_START = re.compile(r"  broken/Broken: UPDATING \(0 of 1 replicas running version \w+; "
                          r"[12] failed starts of at most 3, last: RuntimeError: model file "
                          r"missing: weights.bin\)")


def printed_failed_start(stdout: str) -> bool:
    return any(FAILED_START.fullmatch(line) for line in stdout.splitlines())


def test_deploy_wait_names_the_error_and_where_to_see_all_of_it(grpc_cluster, sqlite_fleet,
                                                               tmp_path) -> None:
    failed = cli(sqlite_fleet, "deploy", str(broken_config(tmp_path)), "--wait")
    assert failed.returncode == 1, failed.stdout
    assert printed_failed_start(failed.stdout), failed.stdout  # not waited on in silence
    assert "broken/Broken: replicas failed to start" in failed.stderr
    assert "Last error: RuntimeError: model file missing: weights.bin" in failed.stderr
    assert "servefleet logs Broken --app broken" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_a_failed_application_deployed_again_unchanged_starts_afresh(
        grpc_cluster, sqlite_fleet, tmp_path) -> None:
    config = broken_config(tmp_path)
    assert cli(sqlite_fleet, "deploy", str(config), "--wait").returncode == 1
    again = cli(sqlite_fleet, "deploy", str(config), "--wait")
    assert again.returncode == 1 and "broken: deploying" in again.stdout, again.stdout
    assert printed_failed_start(again.stdout), again.stdout  # counted from zero


def test_a_failed_application_deleted_and_deployed_again_starts_afresh(
        grpc_cluster, sqlite_fleet, tmp_path) -> None:
    client, _, _ = grpc_cluster
    config = broken_config(tmp_path)
    assert cli(sqlite_fleet, "deploy", str(config), "--wait").returncode == 1
    # Deleted and deployed again at once, its last replica still stopping:
    # its replicas start again rather than it being DEPLOY_FAILED from the start.
    assert cli(sqlite_fleet, "delete", "broken").stdout == "deleted broken\n"
    assert cli(sqlite_fleet, "deploy", str(config)).returncode == 0
    wait_for(lambda: deployment_status(client, "broken")
             == status_pb2.DEPLOYMENT_STATUS_UPDATING, 60, "its replicas to start again")
