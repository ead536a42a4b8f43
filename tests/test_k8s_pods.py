"""The Kubernetes runtime's Pod and Secret builder (controller/runtime/
kubernetes_pods.py), as pure functions: names and labels Kubernetes accepts
whatever servefleet names are, the identity read back, resources, ports,
the code from an image or a volume, the grace period, ownership. The real
API server accepts what it builds: tests/test_k8s_cluster.py."""

from __future__ import annotations

import base64
import json
import re

import pytest

from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import TlsFiles
from servefleet.controller.runtime.base import ReplicaLaunch
from servefleet.controller.runtime.kubernetes_placement import PlacementError
from servefleet.controller.runtime.kubernetes_pods import (
    Owner,
    build_pod,
    deployment_owner,
    identity,
    label_value,
    owner_name,
    owner_of,
    pending_reason,
    pod_name,
    replica_from_pod,
    resources,
    secret_files,
    selector,
    settings_secret,
    waiting_reason,
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
    odd = [pod_name("Prod_Cluster", "r1"), pod_name("x" * 60, "r1"), pod_name("a.b", "r"),
           pod_name("default", "Echo-1f2e"), pod_name("default", "echo-1f2e")]
    assert all(DNS_LABEL.match(n) for n in odd), odd
    assert len(set(odd)) == 5  # Echo and echo too
    # Lower-cased and kept readable, with a hash of the exact names.
    assert odd[3].startswith("servefleet-default-echo-1f2e-")
    # Two clusters whose names only differ where the hash is taken still differ.
    assert pod_name("A", "r") != pod_name("B", "r")


def test_each_deployment_has_an_owner_configmap_its_pods_name() -> None:
    config_map = deployment_owner("prod", "app", "Adder")
    name = config_map["metadata"]["name"]
    assert name == owner_name("prod", "app", "Adder")
    assert name.startswith("servefleet-prod-app-adder-") and DNS_LABEL.match(name)
    assert owner_name("prod", "app", "adder") == "servefleet-prod-app-adder"
    assert owner_name("prod", "app", "Adder") != owner_name("prod", "app", "adder")
    assert config_map["data"] == {"cluster": "prod", "application": "app", "deployment": "Adder"}
    assert identity(config_map["metadata"])["deployment"] == "Adder"
    odd = deployment_owner("prod", "my app/x", "D" * 300)
    assert len(odd["metadata"]["name"]) <= 253
    assert identity(odd["metadata"])["application"] == "my app/x"
    config_map["metadata"]["uid"] = "cm-uid"
    ref = build_pod(_launch(), image="i", owner=owner_of(config_map))["metadata"][
        "ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["uid"]) == ("ConfigMap", name, "cm-uid")
    assert selector("prod", "app", "Adder") == (
        "io.servefleet/cluster=prod,io.servefleet/application=app,"
        "io.servefleet/deployment=Adder")


def test_the_secret_carries_the_replica_tls_files_the_settings_name(tmp_path) -> None:
    plain = secret_files({"token": "t"}, None)
    assert list(plain) == ["settings.json"] and json.loads(plain["settings.json"]) == {
        "token": "t"}
    init_certs(tmp_path)
    tls = TlsFiles.from_dir(tmp_path, "replica")
    files = secret_files({"token": "t"}, tls)
    assert sorted(files) == ["ca.crt", "replica.crt", "replica.key", "settings.json"]
    assert files["replica.key"] == tls.key.read_bytes()
    assert json.loads(files["settings.json"])["tls"] == {
        "ca": "/run/servefleet/ca.crt", "cert": "/run/servefleet/replica.crt",
        "key": "/run/servefleet/replica.key"}
    # Mounted where the settings say: the Pod's settings volume is the Secret.
    pod = build_pod(_launch(), image="i", http_tls=True)
    (mount,) = pod["spec"]["containers"][0]["volumeMounts"]
    assert mount["mountPath"] == "/run/servefleet"
    assert "--http-tls" in pod["spec"]["containers"][0]["command"]


def test_why_a_pod_has_no_address_yet() -> None:
    unschedulable = {"status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/2 nodes are available: 2 Insufficient cpu."}]}}
    assert pending_reason(unschedulable) == (
        "Unschedulable: 0/2 nodes are available: 2 Insufficient cpu.")
    waiting = {"status": {"phase": "Pending", "containerStatuses": [
        {"name": "replica", "state": {"waiting": {"reason": "ContainerCreating"}}}]}}
    assert pending_reason(waiting) == "ContainerCreating"
    assert pending_reason({"status": {"phase": "Pending"}}) == "phase Pending"
    assert "never" in pending_reason(None)


def test_a_container_that_will_not_start_is_a_replica_gone_with_its_reason() -> None:
    pod = build_pod(_launch(), image="nowhere/nothing:1")
    pod["status"] = {"phase": "Pending", "podIP": "10.234.1.9", "containerStatuses": [
        {"name": "replica", "state": {"waiting": {
            "reason": "ErrImageNeverPull", "message":
            'Container image "nowhere/nothing:1" is not present with pull policy of Never'}}}]}
    assert not replica_from_pod(pod).alive
    assert waiting_reason(pod) == ('ErrImageNeverPull: Container image "nowhere/nothing:1" '
                                   "is not present with pull policy of Never")
    pod["status"]["containerStatuses"][0]["state"] = {"waiting": {
        "reason": "ContainerCreating"}}
    assert replica_from_pod(pod).alive  # on its way


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


def test_placement_is_node_affinity_and_topology_spread_or_refused_by_name() -> None:
    pod = build_pod(_launch(constraints=["node.labels.gpu == true", "node.hostname != n3",
                                         "node.platform.os==linux"],
                            spread=["node.labels.zone"]), image="i")
    (term,) = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [
        {"key": "gpu", "operator": "In", "values": ["true"]},
        {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["n3"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["maxSkew"], spread["whenUnsatisfiable"]) == (
        "zone", 1, "ScheduleAnyway")
    assert spread["labelSelector"]["matchLabels"] == {  # the deployment's Pods
        "io.servefleet/cluster": "prod", "io.servefleet/application": "app",
        "io.servefleet/deployment": "Adder"}
    plain = build_pod(_launch(), image="i")["spec"]
    assert "affinity" not in plain and "topologySpreadConstraints" not in plain
    with pytest.raises(PlacementError, match=r"'node.role' has no Kubernetes node label"):
        build_pod(_launch(constraints=["node.role == manager"]), image="i")
    with pytest.raises(PlacementError, match=r"'engine.labels.x' has no Kubernetes"):
        build_pod(_launch(spread=["engine.labels.x"]), image="i")
