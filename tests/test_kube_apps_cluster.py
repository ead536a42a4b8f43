"""ServeApplications on a real API server (scripts/k8s), applied by a real
controller (`--runtime sim --kube-applications`: replicas simulated, so no
Pod is needed): the committed CRD is accepted; `kubectl apply` of a
ServeApplication makes the application (GetStatus shows it RUNNING), and
its status is written back (`kubectl get serveapplications`); an invalid
spec gets a condition naming the field while the application runs on
unchanged; `kubectl delete` deletes the application."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from k8s_cluster import KUBECTL, RUN

from servefleet._private.testing import ControllerProcess
from servefleet.controller.runtime.sim import socket_path
from servefleet.v1 import controller_pb2, controller_pb2_grpc, status_pb2

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "tests" / "apps"
CRD = ROOT / "deploy" / "kubernetes" / "base" / "crd.yaml"
RUNNING = status_pb2.APPLICATION_STATUS_RUNNING


def kubectl(*args: str, input: str | None = None, check: bool = True) -> str:
    done = subprocess.run([str(KUBECTL), "--kubeconfig", str(RUN / "admin.kubeconfig"), *args],
                          capture_output=True, text=True, input=input, timeout=120)
    assert done.returncode == 0 or not check, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture
def api_server(k8s_cluster: bool) -> None:
    """scripts/k8s's cluster, the session's (tests/k8s_cluster.py)."""


@pytest.fixture
def namespace(api_server) -> Iterator[str]:
    kubectl("apply", "-f", str(CRD))
    kubectl("wait", "--for", "condition=established", "--timeout", "60s",
            "crd/serveapplications.servefleet.io")
    name = f"sfapp-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def controller(namespace: str, tmp_path: Path) -> Iterator[ControllerProcess]:
    ctl = ControllerProcess(f"sqlite:///{tmp_path}/state.db", runtime="sim", log_dir=tmp_path,
                            extra_args=["--kube-applications",
                                        "--kubeconfig", str(RUN / "admin.kubeconfig"),
                                        "--kube-namespace", namespace,
                                        "--allow-working-dir", str(APPS)])
    ctl.runtime_dir.mkdir(parents=True, exist_ok=True)
    with open(tmp_path / "sim-host.log", "wb") as out:
        host = subprocess.Popen([sys.executable, "-m", "servefleet.controller.runtime.sim_host",
                                 "--socket", str(socket_path(ctl.runtime_dir)),
                                 "--ready-delay-s", "0.2"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not socket_path(ctl.runtime_dir).exists():
            assert host.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        yield ctl.start()
    finally:
        ctl.stop()
        host.terminate()
        host.wait(10)


def serve_application(name: str, namespace: str, **spec: Any) -> str:
    return json.dumps({"apiVersion": "servefleet.io/v1alpha1", "kind": "ServeApplication",
                       "metadata": {"name": name, "namespace": namespace}, "spec": spec})


def wait_for(what: str, probe: Callable[[], Any], ctl: ControllerProcess,
             timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s\n{ctl.logs()[-3000:]}")
        time.sleep(0.2)


def test_a_serve_application_is_applied_its_status_written_and_its_deletion_followed(
        controller: ControllerProcess, namespace: str) -> None:
    channel = grpc.insecure_channel(controller.address)
    stub = controller_pb2_grpc.ControllerServiceStub(channel)

    def app_status(name: str) -> status_pb2.ApplicationStatusInfo | None:
        reply = stub.GetStatus(controller_pb2.GetStatusRequest(), timeout=5)
        return next((a for a in reply.applications if a.name == name), None)

    def obj(name: str) -> dict[str, Any]:
        return json.loads(kubectl("get", "serveapplications", name, "-n", namespace, "-o",
                                  "json"))

    good = dict(import_path="headers_app:app", runtime={"working_dir": str(APPS)},
                deployments=[{"name": "show", "num_replicas": 2}])
    kubectl("apply", "-f", "-", input=serve_application("headers", namespace, **good))

    # 1. The application appears in GetStatus, named after the object.
    running = wait_for("the application RUNNING", lambda: (
        (s := app_status("headers")) is not None and s.status == RUNNING and s), controller)
    assert [(d.name, d.target_replicas) for d in running.deployments] == [("show", 2)]

    # 2. Its status, written back.
    status = wait_for("status RUNNING 2/2", lambda: (
        (o := obj("headers")).get("status", {}).get("replicas") == "2/2"
        and o["status"]["phase"] == "RUNNING" and o["status"]), controller)
    assert status["application"] == "headers"
    assert status["observedGeneration"] == obj("headers")["metadata"]["generation"]
    ready = {c["type"]: c for c in status["conditions"]}
    assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("True", "Running")
    assert ready["Progressing"]["status"] == "False"
    assert status["deployments"] == [{"name": "show", "status": "HEALTHY", "readyReplicas": 2,
                                      "targetReplicas": 2}]
    table = kubectl("get", "serveapplications", "-n", namespace)
    assert table.split("\n")[0].split() == ["NAME", "STATUS", "REPLICAS", "AGE"]
    assert table.split("\n")[1].split()[:3] == ["headers", "RUNNING", "2/2"], table

    # 3. An invalid spec: a condition naming the field; nothing changed.
    bad = {**good, "deployments": [{"name": "show", "num_replicas": "two"}]}
    kubectl("apply", "-f", "-", input=serve_application("headers", namespace, **bad))
    generation = obj("headers")["metadata"]["generation"]
    status = wait_for("status INVALID", lambda: (
        (o := obj("headers")["status"])["phase"] == "INVALID"
        and o.get("observedGeneration") == generation and o), controller)
    ready = {c["type"]: c for c in status["conditions"]}
    assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("False", "InvalidSpec")
    assert (ready["Stalled"]["status"], ready["Reconciling"]["status"]) == ("True", "False")
    assert ready["Ready"]["message"] == \
        "spec.deployments[0].num_replicas: expected an integer, got 'two'"
    assert status["replicas"] == "2/2"  # the application runs on as it was
    still = app_status("headers")
    assert still is not None and still.status == RUNNING
    assert [(d.name, d.target_replicas) for d in still.deployments] == [("show", 2)]

    # 4. Deleted in Kubernetes: the application is deleted.
    kubectl("delete", "serveapplications", "headers", "-n", namespace)
    wait_for("the application gone", lambda: app_status("headers") is None, controller)
    channel.close()
