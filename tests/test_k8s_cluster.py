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
import os
import subprocess
import time
from pathlib import Path

import pytest
from test_compose import _unavailable

pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(3600)]
ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "scripts" / "k8s"
RUN = ROOT / ".build" / "k8s" / "run"
KUBECTL = ROOT / ".build" / "k8s" / "bin" / "kubectl"
IMAGE = os.environ.get("SERVEFLEET_TEST_IMAGE", "servefleet:latest")
NODES = ("node-a", "node-b")
SERVE = ("import http.server, importlib.metadata as m; "
         "print('servefleet', m.version('servefleet'), flush=True); "
         "http.server.HTTPServer(('', 8080), http.server.SimpleHTTPRequestHandler).serve_forever()")


def _kubectl(*args: str, input: str | None = None) -> str:
    done = subprocess.run([str(KUBECTL), "--kubeconfig", str(RUN / "admin.kubeconfig"), *args],
                          capture_output=True, text=True, input=input, timeout=120)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


def _leftovers() -> list[str]:
    found = [f"netns {n}" for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                   text=True).stdout.split() if "sfk8s" in n]
    found += [f"cgroup {p}" for p in Path("/sys/fs/cgroup").glob("*/sfk8s-*")]
    found += [f"mount {line.split()[4]}" for line in
              Path("/proc/self/mountinfo").read_text().splitlines() if "/.build/k8s/" in line]
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
            if b"/.build/k8s/" in argv or b"k8scluster/relay.py" in argv:
                found.append(f"process {proc.name}")
        except OSError:
            pass
    found += [f"CNI result {p}" for p in Path("/var/lib/cni/results").glob("servefleet-k8s-*")]
    if RUN.exists():
        found.append(f"directory {RUN}")
    return found


@pytest.fixture(scope="module")
def cluster():
    if os.geteuid() != 0:
        pytest.skip("scripts/k8s needs root (network namespaces, cgroups, mounts)")
    built = subprocess.run([str(K8S), "build"], capture_output=True, text=True, timeout=3300)
    if built.returncode:
        pytest.skip(f"the Kubernetes commands could not be built: {built.stderr[-2000:]}")
    with_image = subprocess.run(["docker", "image", "inspect", IMAGE],
                                capture_output=True).returncode == 0
    if _running_here():
        # A cluster this checkout's scripts/k8s started (a developer's, or
        # another test module's): used as it is, and left running.
        yield with_image
        return
    began = time.monotonic()
    started = subprocess.run([str(K8S), "start", *(["--image", IMAGE] if with_image else [])],
                             capture_output=True, text=True, timeout=600)
    print(f"scripts/k8s build: {built.stdout.strip()}; start: {time.monotonic() - began:.0f} s")
    try:
        assert started.returncode == 0, started.stderr[-4000:]
        yield with_image
        _refusals_and_a_killed_node()
    finally:
        stopped = subprocess.run([str(K8S), "stop"], capture_output=True, text=True, timeout=300)
        assert stopped.returncode == 0, stopped.stderr[-3000:]
        assert _leftovers() == []


def _running_here() -> bool:
    """Whether this checkout's cluster runs, every process of it."""
    status = subprocess.run([str(K8S), "status"], capture_output=True, text=True, timeout=60)
    lines = status.stdout.split("\n")
    return (status.returncode == 0 and (RUN / "admin.kubeconfig").exists()
            and any(line.endswith(": running") for line in lines)
            and not any(line.endswith(": stopped") for line in lines))


def _refusals_and_a_killed_node() -> None:
    """A second start is refused, a node that does not exist is named, and
    kill-node leaves no process of the node (the other node's run on)."""
    again = subprocess.run([str(K8S), "start"], capture_output=True, text=True, timeout=60)
    assert again.returncode != 0 and "a cluster is running already" in again.stderr
    unknown = subprocess.run([str(K8S), "kill-node", "node-z"], capture_output=True,
                             text=True, timeout=60)
    assert "no node 'node-z' in this cluster (nodes: node-a, node-b)" in unknown.stderr
    killed = subprocess.run([str(K8S), "kill-node", "node-b"], capture_output=True, text=True,
                            timeout=60)
    assert killed.returncode == 0, killed.stderr
    tree = next(p for p in (Path("/sys/fs/cgroup/pids/sfk8s-node-b"),
                            Path("/sys/fs/cgroup/sfk8s-node-b")) if p.is_dir())
    assert [f.read_text() for f in tree.rglob("cgroup.procs") if f.read_text().strip()] == []
    status = subprocess.run([str(K8S), "status"], capture_output=True, text=True, timeout=60)
    assert "kubelet-node-b: stopped" in status.stdout
    assert "kubelet-node-a: running" in status.stdout, status.stdout


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
