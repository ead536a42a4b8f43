"""The Kubernetes runtime's Pod and Secret builder (controller/runtime/
kubernetes_pods.py), as pure functions: names and labels Kubernetes accepts
whatever servefleet names are, the identity read back, resources, ports,
the code from an image or a volume, the grace period, ownership. The real
API server accepts what it builds: tests/test_k8s_cluster.py."""

from __future__ import annotations

import base64
import re

import pytest

from servefleet.controller.runtime.base import ReplicaLaunch
from servefleet.controller.runtime.kubernetes_pods import (
    Owner,
    build_pod,
    identity,
    label_value,
    pod_name,
    resources,
    selector,
    settings_secret,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LABEL = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _launch(**changes) -> ReplicaLaunch:
    values = dict(cluster="prod", application="app", deployment="Adder", replica_id="r1a2",
                  version="v3", settings={"graceful_shutdown_timeout_s": 7.5,
                                          "graceful_shutdown_wait_loop_s": 2.0})
    values.update(changes)
    return ReplicaLaunch(**values)  # type: ignore[arg-type]


def test_names_are_readable_when_they_can_be_and_hashed_when_not() -> None:
    assert pod_name("prod", "r1a2") == "servefleet-prod-r1a2"
    odd = [pod_name("Prod_Cluster", "r1"), pod_name("x" * 60, "r1"), pod_name("a.b", "r")]
    assert all(DNS_LABEL.match(n) for n in odd), odd
    assert len(set(odd)) == 3
    # Two clusters whose names only differ where the hash is taken still differ.
    assert pod_name("A", "r") != pod_name("B", "r")


def test_identity_goes_through_labels_or_annotations_and_comes_back() -> None:
    launch = _launch(application="my app/with spaces", deployment="D" * 80)
    pod = build_pod(launch, image="servefleet:latest")
    labels = pod["metadata"]["labels"]
    assert all(LABEL.match(v) for v in labels.values()), labels
    assert labels["io.servefleet/deployment"].startswith("h-")
    assert set(pod["metadata"]["annotations"]) == {"io.servefleet/application",
                                                   "io.servefleet/deployment"}
    assert identity(pod["metadata"]) == {
        "cluster": "prod", "application": "my app/with spaces", "deployment": "D" * 80,
        "replica-id": "r1a2", "version": "v3"}
    assert selector("prod") == "io.servefleet/cluster=prod"
    assert label_value("odd cluster") != "odd cluster"
    assert "annotations" not in build_pod(_launch(), image="i")["metadata"]


def test_the_replica_command_ports_probe_and_lifecycle() -> None:
    pod = build_pod(_launch(), image="servefleet:latest", env={"SERVEFLEET_LOG_FORMAT": "json"})
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 10  # 7.5 s timeout + 2 s wait loop
    assert container["command"][:3] == ["python3", "-m", "servefleet.replica"]
    argv = container["command"]
    flags = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert flags["--host"] == "0.0.0.0" and flags["--control-port"] == "7400"
    assert flags["--config-file"] == "/run/servefleet/settings.json"
    assert "--grpc-port" not in flags
    assert [p["containerPort"] for p in container["ports"]] == [7400, 7401, 7402]
    assert container["readinessProbe"]["tcpSocket"] == {"port": 7400}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["PYTHONUNBUFFERED"] == "1" and env["SERVEFLEET_LOG_FORMAT"] == "json"
    grpc = build_pod(_launch(settings={"grpc_servicer_functions": ["m:f"]}), image="i")
    assert grpc["spec"]["containers"][0]["ports"][-1] == {"name": "grpc", "containerPort": 7403}


def test_resources_map_to_requests_and_limits_and_unknown_ones_are_named() -> None:
    assert resources({}) == {}
    mapped = resources({"num_cpus": 0.5, "memory_bytes": 2**30, "num_gpus": 0.5})
    assert mapped["limits"] == mapped["requests"] == {
        "cpu": "500m", "memory": str(2**30), "nvidia.com/gpu": "1"}
    with pytest.raises(ValueError, match="cannot map: tpu"):
        resources({"num_cpus": 1, "tpu": 1})


def test_code_comes_from_the_image_or_a_host_volume() -> None:
    mounted = build_pod(_launch(working_dir="/srv/code"), image="servefleet:latest")
    (container,) = mounted["spec"]["containers"]
    assert container["image"] == "servefleet:latest" and container["workingDir"] == "/srv/code"
    code = next(v for v in mounted["spec"]["volumes"] if v["name"] == "code")
    assert code["hostPath"] == {"path": "/srv/code", "type": "Directory"}
    baked = build_pod(_launch(working_dir="/app", image="team/model:7"), image="servefleet")
    assert baked["spec"]["containers"][0]["image"] == "team/model:7"
    assert [v["name"] for v in baked["spec"]["volumes"]] == ["settings"]


def test_owner_reference_and_the_settings_secret_owned_by_the_pod() -> None:
    owner = Owner("servefleet.io/v1alpha1", "ServeDeployment", "app-adder", "uid-1")
    pod = build_pod(_launch(), image="i", owner=owner)
    (ref,) = pod["metadata"]["ownerReferences"]
    assert ref["uid"] == "uid-1" and ref["controller"] is True
    secret = settings_secret(pod, "pod-uid", {"settings.json": b'{"token": "t"}'})
    assert secret["metadata"]["name"] == pod["spec"]["volumes"][0]["secret"]["secretName"]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "pod-uid"
    assert base64.b64decode(secret["data"]["settings.json"]) == b'{"token": "t"}'
