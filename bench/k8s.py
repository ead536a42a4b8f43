"""servefleet on Kubernetes (issue 55), on scripts/k8s's two-node cluster,
which must run (`scripts/k8s start --image servefleet:latest --image
servefleet-k8s-etcd:test`; tests/k8s_cluster.py builds the etcd image):

- apply_to_first_200_s: the Helm chart installed (as tests/test_k8s_e2e.py
  installs it), a ServeApplication applied with kubectl -> the first 200
  through the proxies' NodePort (the Pod made, the replica importing the
  example and reporting ready, the route reaching the proxies);
- node_loss_replacement_s: 3 replicas spread over both nodes, node-b killed
  (scripts/k8s kill-node) -> the application RUNNING 3/3 again on node-a
  (node-b started again afterwards); kubectl deletes the application and
  helm uninstalls the release at the end;
- watch_*: the cost of watching PODS Pods, the part of the controller that
  grows with them: a process of its own running the Kubernetes runtime's
  Pod cache (KubernetesRuntime.list: list, then watch) over PODS Pods of
  its cluster's labels, bound with nodeName to a Node object nothing runs
  (no kubelet, no kwok: the API server stores and serves them all the same;
  the node lifecycle controller takes it for NotReady after 50 s, and its
  Pods would be evicted after 300 s, longer than this runs). Its memory
  (RSS) before and after the list, the CPU time of the list, of PODS
  changes (a label set on every Pod: PODS MODIFIED events), and of IDLE_S
  seconds idle (bookmarks only).

    bench/k8s.py [--pods 1000] [--no-serving]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from figures import Figure, emit  # noqa: E402
from k8s_cluster import IMAGE, K8S, KUBECONFIG, kubectl, run, running_here  # noqa: E402

IDLE_S = 20.0
NAMESPACE = "sf-bench-watch"
CLUSTER = "benchwatch"
FAKE_NODE = "bench-fake-node"


def serving() -> dict[str, Figure]:
    from test_k8s_e2e import _apply, _get, _serving, _spec, _until, install, uninstall
    figures = {}
    url = install()
    try:
        began = time.monotonic()
        _apply(_spec(1, "1", {}))
        _until("the first 200", lambda: '"positive"' in _get(f"{url}/sentiment?text=good"), 120)
        figures["apply_to_first_200_s"] = Figure([time.monotonic() - began], "s",
                                                 goal="<= 30")
        _apply(_spec(3, "1", {}))
        pods = _until("3 replicas", lambda: _serving(3, "1"), 120)
        lost = sum(p["spec"]["nodeName"] == "node-b" for p in pods)
        run(K8S, "kill-node", "node-b")
        began = time.monotonic()
        _until("3 replicas on node-a", lambda: (found := _serving(3, "1")) and all(
            p["spec"]["nodeName"] == "node-a" for p in found), 180)
        figures["node_loss_replacement_s"] = Figure(
            [time.monotonic() - began], "s", goal="<= 60", extra={"replicas_lost": lost})
    finally:
        uninstall()
    return figures


def _pod(index: int) -> dict:
    labels = {"io.servefleet/cluster": CLUSTER, "io.servefleet/application": "app",
              "io.servefleet/deployment": "D", "io.servefleet/replica-id": f"r{index}",
              "io.servefleet/version": "v1"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"bench-{index}", "labels": labels},
            "spec": {"nodeName": FAKE_NODE, "restartPolicy": "Never",
                     "containers": [{"name": "replica", "image": IMAGE,
                                     "command": ["python", "-m", "servefleet.replica"]}]}}


def watcher() -> None:
    """The watching process: one JSON line per step on stdout, driven by stdin."""
    import asyncio
    import resource

    import psutil

    from servefleet.controller.runtime.kubernetes import KubernetesRuntime
    from servefleet.controller.runtime.kubernetes_api import KubeApi

    def cpu() -> float:
        used = resource.getrusage(resource.RUSAGE_SELF)
        return used.ru_utime + used.ru_stime

    def say(**fields: float) -> None:
        print(json.dumps({**fields, "rss_mb": psutil.Process().memory_info().rss / 2**20,
                          "cpu_s": cpu()}), flush=True)

    async def main() -> None:
        runtime = KubernetesRuntime(CLUSTER, KubeApi.from_kubeconfig(KUBECONFIG, NAMESPACE))
        say(step=0)
        listed = await runtime.list(CLUSTER)
        say(step=1, pods=len(runtime._cache.pods()), alive=len(listed))
        for step in (2, 3):  # 2: the changes are made; 3: idle
            await asyncio.to_thread(sys.stdin.readline)
            began, lists = time.monotonic(), runtime._cache.lists
            if step == 2:
                await runtime._cache.wait_for(lambda pods: all(
                    p["metadata"]["labels"].get("bench") == "changed" for p in pods.values()),
                    300)
            else:
                await asyncio.sleep(IDLE_S)
            say(step=step, took_s=time.monotonic() - began, relists=runtime._cache.lists - lists)
        await runtime.aclose()

    asyncio.run(main())


def watching(count: int) -> dict[str, Figure]:
    kubectl("create", "namespace", NAMESPACE)
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node", "metadata": {
            "name": FAKE_NODE, "labels": {"kubernetes.io/hostname": FAKE_NODE}}}))
    process = None
    try:
        for first in range(0, count, 250):
            kubectl("-n", NAMESPACE, "create", "-f", "-", timeout=300, input=json.dumps({
                "apiVersion": "v1", "kind": "List",
                "items": [_pod(i) for i in range(first, min(count, first + 250))]}))
        process = subprocess.Popen([sys.executable, __file__, "--watcher"], text=True,
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert process.stdin is not None and process.stdout is not None
        steps = [json.loads(process.stdout.readline()) for _ in range(2)]
        assert steps[1]["pods"] == count, steps
        began = time.monotonic()
        kubectl("-n", NAMESPACE, "label", "pods", "--all", "bench=changed", timeout=600)
        labelled = time.monotonic() - began
        for _ in range(2):
            process.stdin.write("\n")
            process.stdin.flush()
            steps.append(json.loads(process.stdout.readline()))
        process.wait(60)
    finally:
        if process is not None and process.poll() is None:
            process.kill()
        # Bound to a node no kubelet runs: a graceful deletion would wait forever.
        kubectl("-n", NAMESPACE, "delete", "pods", "--all", "--grace-period=0", "--force",
                "--wait=false", check=False, timeout=300)
        kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        kubectl("delete", "node", FAKE_NODE, "--wait=false", check=False)
    base, synced, changed, idle = steps
    print(f"watch of {count} Pods: RSS {base['rss_mb']:.0f} -> {synced['rss_mb']:.0f} MB, "
          f"list {synced['cpu_s'] - base['cpu_s']:.2f} s CPU; {count} changes "
          f"({labelled:.0f} s for kubectl to make) {changed['cpu_s'] - synced['cpu_s']:.2f} s "
          f"CPU; idle {IDLE_S:.0f} s: {idle['cpu_s'] - changed['cpu_s']:.2f} s CPU; "
          f"relists {changed['relists'] + idle['relists']}")
    return {
        "watch_rss_mb": Figure([synced["rss_mb"]], "MB", extra={
            "pods": count, "rss_before_list_mb": base["rss_mb"]}),
        "watch_list_cpu_s": Figure([synced["cpu_s"] - base["cpu_s"]], "s"),
        "watch_changes_cpu_s": Figure([changed["cpu_s"] - synced["cpu_s"]], "s"),
        "watch_idle_cpu_pct": Figure([100 * (idle["cpu_s"] - changed["cpu_s"]) / IDLE_S], "%"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--no-serving", action="store_true",
                        help="only the watch's cost (no chart, no node killed)")
    parser.add_argument("--watcher", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.watcher:
        watcher()
        return
    if os.geteuid() != 0 or not running_here():
        raise SystemExit("bench/k8s.py: needs scripts/k8s's cluster running (as root): "
                         "scripts/k8s start --image servefleet:latest "
                         "--image servefleet-k8s-etcd:test")
    # The node it starts again (scripts/k8s start-node) must outlive this run:
    # bench/run-all kills what carries its mark when a benchmark ends.
    os.environ.pop("SERVEFLEET_BENCH_RUN", None)
    load = os.getloadavg()
    figures = {} if args.no_serving else serving()
    figures.update(watching(args.pods))
    print(f"load average at the start: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    emit(figures)


if __name__ == "__main__":
    main()
