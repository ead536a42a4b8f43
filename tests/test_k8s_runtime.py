"""`servefleet controller --runtime kubernetes` on the real Kubernetes of
scripts/k8s (tests/k8s_cluster.py's `k8s_cluster` fixture): two real
controllers on a real etcd, a proxy, and replicas as Pods.

Pod IPs exist only inside the cluster's network namespaces, so etcd, the
controllers, the proxy and the CLI run in node-a's (`ip netns exec`), the
controllers at node-a's address (the Pods' replicas reach them there for
their Watch streams); kubectl reaches the API server from here.

One test, in order, on a cluster with certificates (`servefleet certs
init`, mutual TLS everywhere, replicas' HTTP ports with TLS): an
application deployed, its replica a Pod (owned by its deployment's
ConfigMap, its settings and TLS files in a Secret owned by the Pod)
answering through the proxy (on node-a; the deployment's placement,
`node.hostname == node-b`, puts its Pods on the other node); scaled 1 ->
2, both Pods answer; the leader SIGKILLed, the standby takes over and
adopts both Pods without restarting them (same UIDs), and they go on
answering; the application deleted, no Pod, Secret or ConfigMap of the
cluster is left.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from k8s_cluster import IMAGE, ROOT, RUN
from k8s_cluster import kubectl as _kubectl
from test_compose import _unavailable

from servefleet._private.security.certs import init_certs
from servefleet._private.testing import ControllerProcess, free_port, terminate, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(900)]
NETNS = ["ip", "netns", "exec", "sfk8s-node-a"]
NODE_ADDRESS = "10.233.0.11"  # node-a's, on the cluster's hub (tools/k8s/k8scluster/layout.py)
API_SERVER = "https://10.233.0.1:6443"  # as the nodes reach it
GROUP = "io.servefleet/"


def _config(path: Path, replicas: int) -> Path:
    path.write_text(json.dumps({"applications": [{
        "name": "app", "route_prefix": "/who", "import_path": "hostname_app:app",
        "runtime": {"working_dir": str(ROOT / "tests" / "apps"),
                    "placement": {"constraints": ["node.hostname == node-b"]}},
        "deployments": [{"name": "Hostname", "num_replicas": replicas,
                         "graceful_shutdown_timeout_s": 2,
                         "graceful_shutdown_wait_loop_s": 0.2}]}]}))
    return path


class Node:
    """Commands in node-a's network namespace."""

    def __init__(self, controllers: list[ControllerProcess], certs: Path) -> None:
        self.controllers = ",".join(c.address for c in controllers)
        self.certs = certs

    def run(self, *argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
        return subprocess.run([*NETNS, sys.executable, "-m", "servefleet", *argv,
                               "--controller", self.controllers, "--certs", str(self.certs)],
                              capture_output=True, text=True, timeout=timeout)

    def servefleet(self, *argv: str, timeout: float = 90) -> str:
        done = self.run(*argv, timeout=timeout)
        assert done.returncode == 0, f"servefleet {' '.join(argv)}: {done.stdout}{done.stderr}"
        return done.stdout

    def get(self, url: str) -> str:
        return subprocess.run([*NETNS, "curl", "-sS", "-m", "5", url], capture_output=True,
                              text=True, timeout=30).stdout


def _objects(namespace: str, cluster: str) -> dict[str, list[dict]]:
    listed = json.loads(_kubectl("-n", namespace, "get", "pods,secrets,configmaps", "-l",
                                 f"{GROUP}cluster={cluster}", "-o", "json"))["items"]
    found: dict[str, list[dict]] = {"Pod": [], "Secret": [], "ConfigMap": []}
    for item in listed:
        found[item["kind"]].append(item)
    return found


def _running_pods(namespace: str, cluster: str, count: int) -> dict[str, str]:
    """{Pod name: UID} once `count` Pods of the cluster run (and only they),
    each on node-b, where the deployment's placement puts them."""
    def check() -> dict[str, str] | None:
        pods = _objects(namespace, cluster)["Pod"]
        running = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods
                   if p["status"].get("phase") == "Running"}
        return running if len(running) == count == len(pods) else None
    running = wait_for(check, 60, f"{count} running Pods")
    nodes = {p["spec"]["nodeName"] for p in _objects(namespace, cluster)["Pod"]}
    assert nodes == {"node-b"}, nodes
    return running


def _etcd(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """A real etcd in node-a's namespace (the controllers' store)."""
    client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
    with open(tmp_path / "etcd.log", "wb") as log:
        proc = subprocess.Popen(
            [*NETNS, "etcd", "--name", "k8s-rt", "--data-dir", str(tmp_path / "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"k8s-rt={peer}", "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT)
    return proc, f"etcd://{client.removeprefix('http://')}"


def test_replicas_run_as_pods_scale_survive_a_failover_and_are_deleted(
        k8s_cluster, tmp_path) -> None:
    if not k8s_cluster:
        _unavailable(f"no Docker image {IMAGE} to load into the nodes (scripts/docker-image)")
    began = time.monotonic()
    cluster, namespace = f"rt{uuid.uuid4().hex[:6]}", f"sf-rt-{uuid.uuid4().hex[:6]}"
    _kubectl("create", "namespace", namespace)
    kubeconfig = tmp_path / "kubeconfig"
    config = yaml.safe_load((RUN / "admin.kubeconfig").read_text())
    config["clusters"][0]["cluster"]["server"] = API_SERVER
    kubeconfig.write_text(json.dumps(config))
    etcd, store = _etcd(tmp_path)
    certs = tmp_path / "certs"
    init_certs(certs, hosts=[NODE_ADDRESS])
    controllers = [ControllerProcess(
        store, cluster=cluster, lease_ttl=2, runtime="kubernetes", log_dir=tmp_path,
        host=NODE_ADDRESS, wrap=NETNS, certs=certs,
        extra_args=["--kubeconfig", str(kubeconfig), "--kube-namespace", namespace,
                    "--kube-image", IMAGE, "--kube-pull-policy", "Never",
                    "--allow-working-dir", "/"]) for _ in range(2)]
    node = Node(controllers, certs)
    proxy_port = free_port()
    proxy: subprocess.Popen | None = None
    try:
        for controller in controllers:
            controller.start(wait=False)
        wait_for(lambda: node.run("status").returncode == 0, 60, "a leader")
        node.servefleet("deploy", str(_config(tmp_path / "one.json", 1)), "--wait",
                        "--wait-timeout", "60")
        with open(tmp_path / "proxy.log", "wb") as log:
            proxy = subprocess.Popen([*NETNS, sys.executable, "-m", "servefleet", "proxy",
                                      "--controller", node.controllers,
                                      "--listen", f"127.0.0.1:{proxy_port}",
                                      "--certs", str(certs)],
                                     stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{proxy_port}/who"
        (first,) = _running_pods(namespace, cluster, 1)
        assert json.loads(wait_for(lambda: node.get(url), 30, "an answer"))["host"] == first
        objects = _objects(namespace, cluster)
        (owner,) = objects["ConfigMap"]
        (ref,) = objects["Pod"][0]["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"]) == ("ConfigMap", owner["metadata"]["uid"])
        (secret,) = objects["Secret"]
        assert secret["metadata"]["ownerReferences"][0]["name"] == first
        assert sorted(secret["data"]) == ["ca.crt", "replica.crt", "replica.key",
                                          "settings.json"]

        node.servefleet("deploy", str(_config(tmp_path / "two.json", 2)), "--wait",
                        "--wait-timeout", "60")
        uids = _running_pods(namespace, cluster, 2)
        hosts = {json.loads(node.get(url))["host"] for _ in range(20)}
        assert hosts == set(uids), hosts

        (leader,) = [c for c in controllers if "leading with term" in c.logs()]
        leader.signal(signal.SIGKILL)
        (standby,) = [c for c in controllers if c is not leader]
        wait_for(lambda: standby.logs().count("is adopted") == 2, 60,
                 f"the standby adopting both Pods: {standby.logs()[-3000:]}")
        replicas = json.loads(node.servefleet("replicas", "--json"))
        assert {r["state"] for r in replicas} == {"RUNNING"}
        assert {r["record"].get("http_tls") for r in replicas} == {True}
        assert {r["record"]["handle"] for r in replicas} == set(uids)
        assert _running_pods(namespace, cluster, 2) == uids  # not restarted
        assert {json.loads(node.get(url))["host"] for _ in range(20)} == set(uids)

        node.servefleet("delete", "app")
        wait_for(lambda: not any(_objects(namespace, cluster).values()), 60,
                 "no Pod, Secret or ConfigMap of the cluster left")
        print(f"test_k8s_runtime: {time.monotonic() - began:.0f} s")
    finally:
        terminate(proxy, 10)
        for controller in controllers:
            controller.stop()
        terminate(etcd, 10)
        _kubectl("delete", "namespace", namespace, "--wait=false")
