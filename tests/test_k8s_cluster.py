"""A real Kubernetes on this machine (issue 55, part 1): scripts/k8s builds
kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
and kubectl from the Kubernetes Go modules (cached by Go's build cache),
starts the control plane and two nodes on containerd, each node in a
network namespace of its own; the scheduler places a pause Pod and a Pod of
the servefleet image on each node, a Pod on one node answers one on the
other over the Pod network, the API server reads a Pod's log from its
kubelet; then scripts/k8s stop leaves no process, namespace, cgroup, mount
or container log link behind."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time

import pytest
from k8s_cluster import IMAGE, K8S, NODES, ROOT, RUN
from k8s_cluster import kubectl as _kubectl
from test_compose import _unavailable

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(3600)]
SERVE = ("import http.server, importlib.metadata as m; "
         "print('servefleet', m.version('servefleet'), flush=True); "
         "http.server.HTTPServer(('', 8080), http.server.SimpleHTTPRequestHandler).serve_forever()")


@pytest.fixture
def cluster(k8s_cluster: bool) -> bool:
    """The session's cluster (tests/k8s_cluster.py): whether the servefleet
    image is in it. The Pods an earlier run left in a reused cluster are
    deleted first (a killed node's are Unknown for good)."""
    _kubectl("delete", "pods", "--ignore-not-found", "--grace-period=0", "--force",
             *(f"{kind}-{n}" for kind in ("pause", "serve") for n in NODES))
    return k8s_cluster


def _pod(name: str, node: str, image: str, args: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": image, "args": args,
                                     "imagePullPolicy": "Never"}]}}


def _wait_running(names: list[str], timeout: float = 180) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        pods = {p["metadata"]["name"]: p for p in json.loads(_kubectl(
            "get", "pods", "-o", "json"))["items"]}
        phases = {n: pods.get(n, {}).get("status", {}) for n in names}
        if all(s.get("phase") == "Running" and s.get("podIP") for s in phases.values()):
            return {n: pods[n] for n in names}
        assert time.monotonic() < deadline, json.dumps(phases, indent=1)[-3000:]
        time.sleep(1)


def test_two_nodes_ready_run_pods_of_both_images_and_stop_clean(cluster) -> None:
    nodes = json.loads(_kubectl("get", "nodes", "-o", "json"))["items"]
    ready = {n["metadata"]["name"]: next(c["status"] for c in n["status"]["conditions"]
                                         if c["type"] == "Ready") for n in nodes}
    assert ready == {"node-a": "True", "node-b": "True"}
    pods = [_pod(f"pause-{n}", n, "localhost/servefleet/pause:1", []) for n in NODES]
    if cluster:
        pods += [_pod(f"serve-{n}", n, IMAGE, ["python3", "-c", SERVE]) for n in NODES]
    _kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                   "items": pods}))
    running = _wait_running([p["metadata"]["name"] for p in pods])
    for name, pod in running.items():
        assert name.endswith("-" + pod["spec"]["nodeName"]), (name, pod["spec"]["nodeName"])
    assert len({pod["status"]["podIP"] for pod in running.values()}) == len(pods)
    if not cluster:
        _unavailable(f"no Docker image {IMAGE} to load into the nodes (scripts/docker-image)")
    # node-a's namespace reaches the Pod on node-b over the Pod network.
    target = running["serve-node-b"]["status"]["podIP"]

    def fetch() -> str:
        return subprocess.run(
            ["ip", "netns", "exec", "sfk8s-node-a", "curl", "-sS", "-m", "3",
             "-o", "/dev/null", "-w", "%{http_code}", f"http://{target}:8080/"],
            capture_output=True, text=True, timeout=30).stdout

    assert fetch() == "200"
    # node-b cut off from the others, then back.
    subprocess.run([str(K8S), "cut", "node-b"], check=True, timeout=60)
    try:
        assert fetch() == "000"
    finally:
        subprocess.run([str(K8S), "heal", "node-b"], check=True, timeout=60)
    assert fetch() == "200"
    # The API server reads a log from the kubelet (its serving certificate checked).
    assert _kubectl("logs", "serve-node-a").startswith("servefleet ")


async def test_a_replica_pod_made_watched_and_deleted_through_the_runtime_pieces(cluster) -> None:
    """The Kubernetes runtime's pieces on the real API server: a replica's Pod
    and Secret from kubernetes_pods, made through kubernetes_api's client;
    kubernetes_watch's cache sees it Ready with an IP and reports it as a
    replica whose HTTP address answers (the servefleet image, tests/apps from a
    hostPath volume) from the other node; deleted, the cache drops it, and
    the garbage collector deletes the Secret the Pod owned."""
    if not cluster:
        _unavailable(f"no Docker image {IMAGE} to load into the nodes (scripts/docker-image)")
    import asyncio

    from servefleet.controller.runtime.base import ReplicaLaunch
    from servefleet.controller.runtime.kubernetes_api import KubeApi
    from servefleet.controller.runtime.kubernetes_pods import build_pod, selector, settings_secret
    from servefleet.controller.runtime.kubernetes_watch import PodCache

    apps = str(ROOT / "tests" / "apps")
    launch = ReplicaLaunch(cluster="k8s-test", application="app", deployment="Hello",
                           replica_id="r1", version="v1", working_dir=apps,
                           settings={"import_path": "echo_app:hello", "working_dir": apps,
                                     "graceful_shutdown_timeout_s": 1.0})
    api = KubeApi.from_kubeconfig(RUN / "admin.kubeconfig")
    cache = PodCache(api, selector("k8s-test"))
    watching = asyncio.create_task(cache.run())
    try:
        await asyncio.wait_for(cache.synced(), 30)
        pod = build_pod(launch, image=IMAGE, pull_policy="Never")
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "node-b"}
        name = pod["metadata"]["name"]
        created = await api.create("pods", pod)
        await api.create("secrets", settings_secret(pod, created["metadata"]["uid"], {
            "settings.json": json.dumps(launch.settings).encode()}))

        def ready(pods: dict) -> bool:
            conditions = pods.get(name, {}).get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        await cache.wait_for(ready, 180)
        (replica,) = cache.replicas()
        assert (replica.replica_id, replica.deployment, replica.alive) == ("r1", "Hello", True)
        fetched = await asyncio.to_thread(
            subprocess.run, ["ip", "netns", "exec", "sfk8s-node-a", "curl", "-sS", "-m", "10",
                             f"http://{replica.http_address}/?name=kubernetes"],
            capture_output=True, text=True, timeout=30)
        assert fetched.stdout == "hello kubernetes", fetched.stderr + _kubectl("logs", name)
        await api.delete("pods", name, grace_s=1)
        await cache.wait_for(lambda pods: name not in pods, 60)
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    deadline = time.monotonic() + 60
    while f"secret/{name}" in _kubectl("get", "secrets", "-o", "name").split():
        assert time.monotonic() < deadline, "the Secret outlived its Pod"
        await asyncio.sleep(0.5)


async def test_the_kubernetes_runtime_starts_lists_stops_and_prunes_replicas(cluster) -> None:
    """controller/runtime/kubernetes.py on the real API server: a started
    replica answers at the address inspect gives, a retried start finds the
    same Pod, list shows it, its log is read, stop removes it; a replica that
    exits while loading ends with its exit code, its output in logs, and
    prune removes its Pod."""
    if not cluster:
        _unavailable(f"no Docker image {IMAGE} to load into the nodes (scripts/docker-image)")
    import asyncio

    from servefleet.controller.runtime.base import ReplicaLaunch
    from servefleet.controller.runtime.kubernetes import KubernetesRuntime
    from servefleet.controller.runtime.kubernetes_api import KubeApi

    apps = str(ROOT / "tests" / "apps")

    def launch(replica_id: str, import_path: str) -> ReplicaLaunch:
        return ReplicaLaunch(cluster="k8s-rt", application="app", deployment="Hello",
                             replica_id=replica_id, version="v1", working_dir=apps,
                             settings={"import_path": import_path, "working_dir": apps,
                                       "graceful_shutdown_timeout_s": 1.0})

    runtime = KubernetesRuntime("k8s-rt", KubeApi.from_kubeconfig(RUN / "admin.kubeconfig"),
                                IMAGE, pull_policy="Never")
    try:
        started = await runtime.start(launch("r1", "echo_app:hello"))
        assert started.handle == "servefleet-k8s-rt-r1" and started.alive
        assert (await runtime.start(launch("r1", "echo_app:hello"))).handle == started.handle
        answer, deadline = "", time.monotonic() + 180
        while answer != "hello kubernetes":
            assert time.monotonic() < deadline, (answer, runtime.logs("r1"))
            await asyncio.sleep(1)
            seen = await runtime.inspect(started.handle)
            if seen and seen.http_address:
                answer = (await asyncio.to_thread(subprocess.run, [
                    "ip", "netns", "exec", "sfk8s-node-a", "curl", "-sS", "-m", "5",
                    f"http://{seen.http_address}/?name=kubernetes"],
                    capture_output=True, text=True, timeout=30)).stdout
        assert [r.replica_id for r in await runtime.list("k8s-rt")] == ["r1"]
        text, cursor = await asyncio.to_thread(runtime.read_logs, "r1", "", 50)
        assert cursor and isinstance(text, str)
        await runtime.stop(started.handle, 2)
        assert await runtime.inspect(started.handle) is None
        assert await runtime.list("k8s-rt") == []

        broken = await runtime.start(launch("r2", "exits_app:Gone"))  # exits with 7
        deadline = time.monotonic() + 180
        while (seen := await runtime.inspect(broken.handle)) is None or seen.alive:
            assert time.monotonic() < deadline, runtime.logs("r2")
            await asyncio.sleep(1)
        assert seen.exit_code == 7
        assert "exits_app: giving up on purpose" in runtime.logs("r2")
        assert await runtime.prune("k8s-rt", keep=set()) == ["r2"]
        deadline = time.monotonic() + 60
        while await runtime.inspect(broken.handle) is not None:
            assert time.monotonic() < deadline, "the pruned Pod stayed"
            await asyncio.sleep(0.5)
    finally:
        await runtime.aclose()
