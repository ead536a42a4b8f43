"""gRPC ingress for real: a controller, replicas and a proxy with --grpc-listen,
called with the classifier example's generated stub (and from Node)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from servefleet import get_deployment_handle
from servefleet._private.cli.output import replicas_text
from servefleet._private.testing import wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import ingress_pb2, ingress_pb2_grpc, replica_pb2, status_pb2

ROOT = Path(__file__).resolve().parent.parent
APPS = str(ROOT / "tests" / "apps")
sys.path.insert(0, str(ROOT / "examples"))

from grpc_classifier import classifier_pb2 as pb  # noqa: E402
from grpc_classifier import classifier_pb2_grpc as pb_grpc  # noqa: E402

pytestmark = pytest.mark.slow
SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"


def _running(client: ControllerClient, name: str) -> bool:
    info = client.application_status(name)
    return info is not None and info.status == status_pb2.APPLICATION_STATUS_RUNNING


def _application(marks: Path, replicas: int = 2) -> apb.ApplicationSpec:
    return apb.ApplicationSpec(
        name="clf", route_prefix="/clf", import_path="grpc_app:build",
        args_json=json.dumps({"marks": str(marks)}), grpc_servicer_functions=[SERVICER],
        runtime=dpb.RuntimeOptions(working_dir=APPS),
        deployments=[apb.DeploymentOverride(
            name="Model", replica_config=dpb.ReplicaConfig(
                num_replicas=replicas, max_ongoing_requests=4,
                graceful_shutdown_wait_loop_s=0.1, graceful_shutdown_timeout_s=5,
                user_config_json=""))],
    )


def _predict(stub, text: str, app: str | None = "clf", **kwargs):
    kwargs.setdefault("metadata", (("application", app),) if app else ())
    return stub.Predict(pb.PredictRequest(text=text), **kwargs)


def test_calls_statuses_deadlines_and_cancellation(grpc_cluster, sqlite_fleet,
                                                   tmp_path) -> None:
    client, proxy, target = grpc_cluster
    controllers = sqlite_fleet.addresses()
    marks = tmp_path / "marks"
    marks.mkdir()
    client.deploy_applications([_application(marks)])
    wait_for(lambda: _running(client, "clf"), 90, "clf RUNNING")
    channel = grpc.insecure_channel(target)
    stub = pb_grpc.ClassifierStub(channel)
    wait_for(lambda: _answers(stub), 30, "the gRPC route at the proxy")

    # Unary, over both replicas; the request id and application reach user code.
    replies = [_predict(stub, "hi", timeout=10) for _ in range(30)]
    assert {r.label for r in replies} == {"v1"} and len({r.replica for r in replies}) == 2
    request_id, app = replies[0].word.split()
    assert len(request_id) == 32 and app == "clf"
    reply = stub.Predict(pb.PredictRequest(text="hi"), timeout=10,
                         metadata=(("application", "clf"), ("x-request-id", "abc-123")))
    assert reply.word == "abc-123 clf"
    # Without the metadata key: the one application serving the service.
    assert _predict(stub, "hi", app=None, timeout=10).label == "v1"
    # Server streaming from a plain generator.
    words = [r.word for r in stub.PredictStream(pb.PredictRequest(text="a b c"), timeout=10,
                                                metadata=(("application", "clf"),))]
    assert words == ["a", "b", "c"]
    # HTTP and handle calls to the same deployment work beside gRPC.
    assert httpx.get(proxy.url + "/clf", timeout=10).json() == {"label": "v1", "http": True}

    async def by_handle() -> str:
        return await get_deployment_handle("Model", "clf", controllers).describe.remote("h")
    assert asyncio.run(by_handle()) == "h v1"

    def status_of(text: str, app: str | None = "clf", **kwargs) -> grpc.RpcError:
        with pytest.raises(grpc.RpcError) as raised:
            _predict(stub, text, app=app, **kwargs)
        return raised.value

    unknown = status_of("hi", app="nope", timeout=10)
    assert unknown.code() == grpc.StatusCode.NOT_FOUND and "clf" in (unknown.details() or "")
    failed = status_of("fail", timeout=10)
    assert failed.code() == grpc.StatusCode.UNKNOWN
    assert "ValueError: failed on purpose" in (failed.details() or "")
    chosen = status_of("code:FAILED_PRECONDITION", timeout=10)
    assert chosen.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert chosen.details() == "chose FAILED_PRECONDITION"
    assert _trailing(chosen).get("chosen") == "FAILED_PRECONDITION"

    # The client's deadline is the replica's: the user's coroutine is cancelled.
    late = status_of("sleep:10", timeout=1,
                     metadata=(("application", "clf"), ("x-request-id", "deadline-1")))
    assert late.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_for(lambda: (marks / "deadline-1").exists(), 10, "the deadline reaching the replica")
    # A client that cancels cancels the call at the replica.
    future = stub.Predict.future(pb.PredictRequest(text="sleep:10"), timeout=30,
                                 metadata=(("application", "clf"), ("x-request-id", "gone-1")))
    time.sleep(1)
    future.cancel()
    wait_for(lambda: (marks / "gone-1").exists(), 10, "the cancellation reaching the replica")

    # The port's own services.
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                       timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    apps = ingress_pb2_grpc.IngressServiceStub(channel).ListApplications(
        ingress_pb2.IngressServiceListApplicationsRequest(), timeout=5)
    assert [(a.name, list(a.services)) for a in apps.applications] == [
        ("clf", ["classifier.v1.Classifier"])]
    channel.close()


def _trailing(error: grpc.RpcError) -> dict[str, object]:
    pairs: Any = error.trailing_metadata() or ()  # type: ignore[attr-defined]
    return {str(k): v for k, v in pairs}


def _answers(stub) -> bool:
    try:
        return _predict(stub, "hi", timeout=5).label != ""
    except grpc.RpcError:
        return False


def _model(version: str, label: str, replicas: int = 2) -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(
        name="Model", application="clf", import_path="grpc_app:Model", version=version,
        init_kwargs_json=f'{{"label": "{label}"}}', grpc_servicer_functions=[SERVICER],
        runtime=dpb.RuntimeOptions(working_dir=APPS),
        replica_config=dpb.ReplicaConfig(num_replicas=replicas, max_ongoing_requests=4,
                                         graceful_shutdown_wait_loop_s=0.1,
                                         graceful_shutdown_timeout_s=5))


class GrpcLoad:
    """Unary calls back to back from `concurrency` async callers in a thread."""

    def __init__(self, target: str, text: str = "hi", concurrency: int = 4) -> None:
        self.target, self.text, self.concurrency = target, text, concurrency
        self.ok = 0
        self.failed: list[str] = []
        self.labels: set[str] = set()
        self._stop = False
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with grpc.aio.insecure_channel(self.target) as channel:
            stub = pb_grpc.ClassifierStub(channel)

            async def caller() -> None:
                while not self._stop:
                    try:
                        reply = await stub.Predict(pb.PredictRequest(text=self.text),
                                                   metadata=(("application", "clf"),),
                                                   timeout=30)
                    except grpc.aio.AioRpcError as e:
                        self.failed.append(f"{e.code().name}: {e.details()}")
                        continue
                    self.ok += 1
                    self.labels.add(reply.label)

            await asyncio.gather(*[caller() for _ in range(self.concurrency)])

    def __enter__(self) -> GrpcLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        self._thread.join(60)


def test_kill_and_rolling_update_under_grpc_load(grpc_cluster) -> None:
    client, _, target = grpc_cluster
    client.deploy(_model("v1", "one"))
    wait_for(lambda: len([r for r in client.replicas("clf", "Model")
                          if r.state == replica_pb2.REPLICA_STATE_RUNNING]) == 2, 60,
             "2 replicas running")
    stub = pb_grpc.ClassifierStub(grpc.insecure_channel(target))
    wait_for(lambda: _answers(stub), 30, "the gRPC route at the proxy")

    # A replica SIGKILLed under load: only calls it had received may fail
    # (at most its 4 in flight); the rest are retried on the other replica.
    with GrpcLoad(target, text="sleep:0.02") as load:
        wait_for(lambda: load.ok > 100, 30, "traffic before the kill")
        victim = next(r for r in client.replicas("clf", "Model")
                      if r.state == replica_pb2.REPLICA_STATE_RUNNING)
        os.kill(int(victim.record.handle.split(":")[0]), signal.SIGKILL)
        at_kill = load.ok
        wait_for(lambda: load.ok > at_kill + 200, 60, "traffic after the kill")
    print(f"replica SIGKILLed under gRPC load: {load.ok} ok, {len(load.failed)} failed: "
          f"{load.failed}")
    assert len(load.failed) <= 4, load.failed
    wait_for(lambda: len([r for r in client.replicas("clf", "Model")
                          if r.state == replica_pb2.REPLICA_STATE_RUNNING]) == 2, 60,
             "the replica replaced")

    # A rolling update under load fails no call.
    with GrpcLoad(target) as load:
        wait_for(lambda: load.ok > 50, 30, "traffic before the rollout")
        client.deploy(_model("v2", "two"))

        def rolled() -> bool:
            deps = [d for a in client.status().applications for d in a.deployments]
            return bool(deps) and deps[0].version == "v2" and \
                deps[0].status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
        wait_for(rolled, 90, "rollout to v2")
        at_end = load.ok
        wait_for(lambda: load.ok > at_end + 50, 30, "traffic after the rollout")
    print(f"rolling update under gRPC load: {load.ok} ok, {len(load.failed)} failed")
    assert load.failed == [], load.failed[:5]
    assert load.labels == {"one", "two"}


def test_a_full_replica_refuses_with_resource_exhausted_and_the_marker(grpc_cluster) -> None:
    client, _, _ = grpc_cluster
    spec = _model("v1", "one", replicas=1)
    spec.replica_config.max_ongoing_requests = 1
    client.deploy(spec)
    wait_for(lambda: any(r.state == replica_pb2.REPLICA_STATE_RUNNING
                         for r in client.replicas("clf", "Model")), 60, "running")
    replica = next(iter(client.replicas("clf", "Model"))).record
    assert replica.grpc_address
    assert "GRPC" in replicas_text(client.replicas()) and replica.grpc_address in \
        replicas_text(client.replicas())  # `servefleet replicas`
    # Straight to the replica, as a second proxy that does not know it is busy would.
    channel = grpc.insecure_channel(replica.grpc_address)
    stub = pb_grpc.ClassifierStub(channel)
    busy = stub.Predict.future(pb.PredictRequest(text="sleep:3"), timeout=10)
    time.sleep(0.5)
    with pytest.raises(grpc.RpcError) as refused:
        stub.Predict(pb.PredictRequest(text="hi"), timeout=10)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _trailing(refused.value).get("x-servefleet-rejected") == "overloaded"
    assert busy.result().label == "one"
    channel.close()


def test_a_node_client_calls_through_the_proxy(grpc_cluster, node_grpc) -> None:
    client, _, target = grpc_cluster
    client.deploy(_model("v1", "one", replicas=1))
    stub = pb_grpc.ClassifierStub(grpc.insecure_channel(target))
    wait_for(lambda: _answers(stub), 60, "the gRPC route at the proxy")
    out = subprocess.run(
        ["node", str(ROOT / "tests" / "node" / "classifier_client.js"), target, "clf",
         str(ROOT / "examples" / "grpc_classifier" / "classifier.proto")],
        capture_output=True, text=True, timeout=60, env={**os.environ, "NODE_PATH": node_grpc})
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("predict one ") and lines[1] == "stream a,b,c"
    assert lines[2] == "missing NOT_FOUND"


def test_the_grpc_ingress_routes_by_the_deployments_router(grpc_cluster, tmp_path) -> None:
    """prefix_affinity through the gRPC ingress: calls whose routing key
    (metadata x-servefleet-routing-key) shares a prefix reach one replica."""
    client, _, target = grpc_cluster
    app = _application(tmp_path, replicas=3)
    app.deployments[0].replica_config.request_router = "prefix_affinity"
    client.deploy_applications([app])
    wait_for(lambda: _running(client, "clf"), 60, "clf RUNNING")
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.ClassifierStub(channel)
        wait_for(lambda: _predict(stub, "warm").label, 30, "the gRPC route")
        for c in range(6):
            key = f"conversation {c}: " + "the same long opening of the talk " * 3
            seen = {_predict(stub, "so slow and sad", metadata=(
                ("application", "clf"), ("x-servefleet-routing-key", key + "turn " * t)
            )).replica for t in range(5)}
            assert len(seen) == 1, (c, seen)
