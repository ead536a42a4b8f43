"""servefleet on Kubernetes end to end (issue 55), on the real two-node
cluster of scripts/k8s (tests/k8s_cluster.py): `helm install` of the chart;
a ServeApplication (examples/sentiment.py, in the image) applied with
kubectl and answered through the proxies' Service (a NodePort, reached from
node-a's network namespace); scaled 1 -> 3 by editing the object; a rolling
update (a new version and user_config) under steady load with no failed
request; node-b killed (scripts/k8s kill-node: its kubelet, containerd and
Pods gone at once) with its replicas replaced on node-a while the load goes
on, no request failing but those in flight when the node died; node-b
started again; `helm uninstall`: nothing of the release is left, the
replicas' Pods, Secrets and ConfigMaps included.

etcd, the controllers and the proxies are kept on node-a (nodeSelector):
the loss here is of replicas. The replicas spread over both nodes
(runtime.placement.spread: node.hostname). Figures are printed (-s)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from k8s_cluster import BIN, IMAGE, K8S, ROOT, kubectl, left_in, run
from test_compose import _unavailable
from test_k8s_install import CHART, TEST_VALUES

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(600)]
NAMESPACE, RELEASE, APP = "sf-e2e", "sfe", "sentiment"
NODE_A = ["ip", "netns", "exec", "sfk8s-node-a"]
NODE_A_ADDRESS = "10.233.0.11"  # tools/k8s/k8scluster/layout.py
ON_NODE_A = '{"kubernetes.io/hostname": "node-a"}'
GROUP = "io.servefleet/"


def _spec(replicas: int, version: str, user_config: dict) -> dict:
    return {"apiVersion": "servefleet.io/v1alpha1", "kind": "ServeApplication",
            "metadata": {"name": APP},
            "spec": {"import_path": "sentiment:app", "route_prefix": "/sentiment",
                     "runtime": {"working_dir": "/opt/servefleet/examples", "image": IMAGE,
                                 "placement": {"spread": ["node.hostname"]}},
                     "deployments": [{"name": "SentimentModel", "num_replicas": replicas,
                                      "version": version, "user_config": user_config,
                                      "graceful_shutdown_timeout_s": 2,
                                      "graceful_shutdown_wait_loop_s": 0.5,
                                      "health_check_period_s": 2,
                                      "health_check_timeout_s": 2}]}}


def _apply(spec: dict) -> None:
    kubectl("-n", NAMESPACE, "apply", "-f", "-", input=json.dumps(spec))


def _until(what: str, check, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(every)
    return found


def _replica_pods() -> list[dict]:
    """The replicas' Pods that run and are not being deleted."""
    pods = json.loads(kubectl("-n", NAMESPACE, "get", "pods", "-o", "json", "-l",
                              f"{GROUP}cluster"))["items"]
    return [p for p in pods if p["status"].get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")]


def _serving(replicas: int, version: str):
    """The Pods, once the application is RUNNING at the object's generation
    with `replicas` ready, all of `version`; else None."""
    obj = json.loads(kubectl("-n", NAMESPACE, "get", "serveapplication", APP, "-o", "json"))
    status = obj.get("status") or {}
    if (status.get("phase") != "RUNNING" or status.get("readyReplicas") != replicas
            or status.get("observedGeneration") != obj["metadata"]["generation"]):
        return None
    pods = _replica_pods()
    if len(pods) != replicas or {p["metadata"]["labels"][f"{GROUP}version"]
                                 for p in pods} != {version}:
        return None
    return pods


def _get(url: str) -> str:
    done = subprocess.run([*NODE_A, "curl", "-sS", "-m", "5", url], capture_output=True,
                          text=True, timeout=30)
    return done.stdout


class Load:
    """tests/k8s_load.py in node-a's namespace, until stopped."""

    def __init__(self, url: str, expect: str, clients: int = 4) -> None:
        self.process = subprocess.Popen(
            [*NODE_A, sys.executable, str(ROOT / "tests" / "k8s_load.py"), url, expect,
             str(clients)], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "started"

    def stop(self) -> list[list]:
        self.process.send_signal(signal.SIGTERM)
        out, _ = self.process.communicate(timeout=60)
        return [json.loads(line) for line in out.splitlines()]


def install() -> str:
    """The chart installed (its Pods on node-a, the proxies on a NodePort):
    the proxies' URL from node-a's namespace. On failure, uninstalled."""
    _until("an earlier run's namespace gone", lambda: f"namespace/{NAMESPACE}" not in kubectl(
        "get", "namespaces", "-o", "name").split(), 120)
    began = time.monotonic()
    try:
        run(BIN / "helm", "install", RELEASE, CHART, "--namespace", NAMESPACE,
            "--create-namespace", *TEST_VALUES, "--set", "proxy.service.type=NodePort",
            *(arg for part in ("etcd", "controller", "proxy")
              for arg in ("--set-json", f"{part}.nodeSelector={ON_NODE_A}")),
            "--wait", "--timeout", "150s", timeout=200)
        port = kubectl("-n", NAMESPACE, "get", "service", f"{RELEASE}-servefleet-proxy",
                       "-o", "jsonpath={.spec.ports[0].nodePort}")
    except BaseException:
        uninstall()
        raise
    print(f"\nhelm install --wait: {time.monotonic() - began:.1f} s")
    return f"http://{NODE_A_ADDRESS}:{port}"


def uninstall() -> None:
    """node-b running again (if it was killed), then `helm uninstall`: it
    takes the replicas with it (their ConfigMaps are owned by the
    controllers' Deployment), and nothing of the release may be left."""
    status = subprocess.run([str(K8S), "status"], capture_output=True, text=True)
    if "kubelet-node-b: stopped" in status.stdout:
        run(K8S, "start-node", "node-b", timeout=200)
    try:
        began = time.monotonic()
        run(BIN / "helm", "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
            "--timeout", "90s")
        _until("nothing of the release left", lambda: not left_in(NAMESPACE), 90)
        print(f"helm uninstall -> nothing left: {time.monotonic() - began:.1f} s")
    finally:
        # With the ServeApplication, which is the user's, not the release's.
        kubectl("delete", "namespace", NAMESPACE, "--wait=false")


@pytest.fixture
def release(k8s_cluster: bool) -> Iterator[str]:
    if not k8s_cluster:
        _unavailable(f"no Docker image {IMAGE} to load into the nodes (scripts/docker-image)")
    url = install()
    try:
        yield url
    finally:
        uninstall()


def _failures(records: list[list]) -> list[list]:
    return [r for r in records if not r[2]]


def test_install_serve_scale_roll_lose_a_node_and_uninstall(release: str) -> None:
    url = f"{release}/sentiment?text=a+great+day"
    began = time.monotonic()
    _apply(_spec(1, "1", {}))
    _until("the first 200", lambda: '"positive"' in _get(url), 120)
    print(f"ServeApplication applied -> first 200: {time.monotonic() - began:.1f} s")

    load = Load(url, '"positive"')
    try:
        began = time.monotonic()
        _apply(_spec(3, "1", {}))
        pods = _until("3 replicas", lambda: _serving(3, "1"), 120)
        print(f"scaled 1 -> 3: {time.monotonic() - began:.1f} s")
        began = time.monotonic()
        _apply(_spec(3, "2", {"extra_positive": ["rad"]}))
        pods = _until("the rollout to version 2", lambda: _serving(3, "2"), 180)
        assert '"positive"' in _get(f"{release}/sentiment?text=rad")
        print(f"rolling update of 3: {time.monotonic() - began:.1f} s")
        rolled = load.stop()
        assert rolled and _failures(rolled) == [], _failures(rolled)[:5]

        on_b = [p["metadata"]["name"] for p in pods if p["spec"]["nodeName"] == "node-b"]
        assert on_b, "the spread put no replica on node-b"
        load = Load(url, '"positive"')
        time.sleep(2)
        killed = time.time()
        run(K8S, "kill-node", "node-b")
        began = time.monotonic()
        pods = _until("3 replicas on node-a", lambda: (found := _serving(3, "2")) and all(
            p["spec"]["nodeName"] == "node-a" for p in found) and found, 150)
        print(f"node-b killed -> {len(on_b)} replica(s) replaced on node-a: "
              f"{time.monotonic() - began:.1f} s")
        time.sleep(2)
    finally:
        records = load.stop()
    # Only requests in flight when the node died may fail.
    unexcused = [r for r in _failures(records) if not r[0] <= killed <= r[1]]
    excused = len(_failures(records)) - len(unexcused)
    print(f"{len(records)} requests across the node's loss, {excused} failed in flight")
    assert unexcused == [], unexcused[:5]
    assert any(r[2] and r[0] > killed + 5 for r in records), "no answer after the loss"
