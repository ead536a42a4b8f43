"""A lost node as the Kubernetes runtime sees it (controller/runtime/
kubernetes_nodes.py), against tests/test_k8s_runtime_logic.py's API server
in memory: a start's Pod bound to a node whose kubelet never writes its
status is deleted at once and made again with a required affinity off that
node; the Pods already on the node are then reported gone, and stopping one
deletes it with grace period 0 (also one whose graceful stop was under way
when the node was found lost). A Pod its kubelet took is waited for as
before, however slow its IP. tests/test_k8s_e2e.py kills a real node."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_k8s_runtime_logic import FakeKube, _launch

from servefleet.controller.runtime.kubernetes import KubernetesRuntime
from servefleet.controller.runtime.kubernetes_nodes import LostNodes, avoiding


class GraceKube(FakeKube):
    """FakeKube that remembers each Pod deletion's grace period."""

    def __init__(self) -> None:
        super().__init__()
        self.graces: dict[str, int | None] = {}
        self.dead: set[str] = set()  # nodes whose kubelet never confirms a graceful deletion

    async def delete(self, kind: str, name: str, grace_s: int | None = None) -> None:
        if kind == "pods":
            self.graces[name] = grace_s
            pod = self.objects["pods"].get(name)
            if grace_s and pod is not None and pod["spec"].get("nodeName") in self.dead:
                pod["metadata"]["deletionTimestamp"] = "now"
                self._changed("pods", "MODIFIED", pod)
                return
        await super().delete(kind, name, grace_s)

    def bind(self, name: str, node: str, status: dict[str, Any] | None = None) -> None:
        pod = self.objects["pods"][name]
        pod["spec"]["nodeName"] = node
        pod["status"] = status or {"phase": "Pending"}
        self._changed("pods", "MODIFIED", pod)


def _away(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms = (pod["spec"].get("affinity", {}).get("nodeAffinity", {})
             .get("requiredDuringSchedulingIgnoredDuringExecution", {})
             .get("nodeSelectorTerms", []))
    return [e for t in terms for e in t["matchExpressions"]]


@pytest.fixture
async def lost_runtime():
    kube = GraceKube()
    runtime = KubernetesRuntime("prod", kube, "servefleet:latest",  # type: ignore[arg-type]
                                env={}, address_timeout_s=5, ack_timeout_s=0.3)
    yield kube, runtime
    await runtime.aclose()


async def _until(check, timeout: float = 5) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def test_a_pod_no_kubelet_takes_is_made_again_off_its_node(lost_runtime) -> None:
    kube, runtime = lost_runtime
    # r0 runs on node-b; then node-b's kubelet dies (nothing writes status there).
    old = asyncio.create_task(runtime.start(_launch("r0")))
    await _until(lambda: "servefleet-prod-r0" in kube.objects["secrets"])
    kube.bind("servefleet-prod-r0", "node-b", {"phase": "Running", "startTime": "t",
                                               "hostIP": "10.233.0.12", "podIP": "10.234.2.5"})
    assert (await old).alive
    name = "servefleet-prod-r1"
    starting = asyncio.create_task(runtime.start(_launch("r1")))
    await _until(lambda: name in kube.objects["secrets"])
    first_uid = kube.objects["pods"][name]["metadata"]["uid"]
    assert _away(kube.objects["pods"][name]) == []
    kube.bind(name, "node-b")  # the scheduler's choice; no kubelet takes it
    # Deleted at once (grace 0) with its Secret, and made again away from node-b.
    await _until(lambda: name in kube.objects["secrets"]
                 and kube.objects["pods"].get(name, {}).get("metadata", {}).get("uid")
                 not in (None, first_uid))
    assert kube.graces[name] == 0
    again = kube.objects["pods"][name]
    assert _away(again) == [{"key": "kubernetes.io/hostname", "operator": "NotIn",
                             "values": ["node-b"]}]
    assert kube.objects["secrets"][name]["metadata"]["ownerReferences"][0]["uid"] == \
        again["metadata"]["uid"]
    kube.bind(name, "node-a", {"phase": "Running", "startTime": "t", "hostIP": "10.233.0.11",
                               "podIP": "10.234.1.7"})
    replica = await asyncio.wait_for(starting, 5)
    assert (replica.alive, replica.control_address) == (True, "10.234.1.7:7400")
    # r0, on the lost node, is gone for the controller; stopping it does not wait.
    gone = await runtime.inspect("servefleet-prod-r0")
    assert gone is not None and not gone.alive
    assert [r.replica_id for r in await runtime.list("prod")] == ["r1"]
    await asyncio.wait_for(runtime.stop("servefleet-prod-r0", 20), 5)
    assert kube.graces["servefleet-prod-r0"] == 0 and "servefleet-prod-r0" not in \
        kube.objects["pods"]


async def test_a_pod_its_kubelet_took_is_waited_for_however_slow(lost_runtime) -> None:
    kube, runtime = lost_runtime
    name = "servefleet-prod-r2"
    starting = asyncio.create_task(runtime.start(_launch("r2")))
    await _until(lambda: name in kube.objects["secrets"])
    uid = kube.objects["pods"][name]["metadata"]["uid"]
    kube.bind(name, "node-b", {"phase": "Pending", "startTime": "t", "hostIP": "10.233.0.12"})
    await asyncio.sleep(0.8)  # well past the 0.3 s a kubelet has to take it
    assert not starting.done() and kube.objects["pods"][name]["metadata"]["uid"] == uid
    kube.set_status(name, {"phase": "Running", "startTime": "t", "podIP": "10.234.2.9"})
    assert (await asyncio.wait_for(starting, 5)).alive
    assert name not in kube.graces
    await runtime.stop(name, 2)
    assert kube.graces[name] == 2


async def test_a_pod_stopping_on_a_node_found_lost_meanwhile_is_deleted_at_once(
        lost_runtime) -> None:
    kube, runtime = lost_runtime
    name = "servefleet-prod-r3"
    starting = asyncio.create_task(runtime.start(_launch("r3")))
    await _until(lambda: name in kube.objects["secrets"])
    kube.bind(name, "node-b", {"phase": "Running", "startTime": "t", "podIP": "10.234.2.3"})
    await starting
    kube.dead.add("node-b")  # its kubelet dies; the controller stops the replica
    stopping = asyncio.create_task(runtime.stop(name, 20))
    await asyncio.sleep(0.3)
    assert not stopping.done() and kube.graces[name] == 20  # graceful: waits for a kubelet
    runtime._lost.mark("node-b")  # as a start's Pod there untaken would
    await asyncio.wait_for(stopping, 3)
    assert kube.graces[name] == 0 and name not in kube.objects["pods"]


def test_lost_nodes_expire_and_avoiding_adds_to_every_term() -> None:
    now = [0.0]
    lost = LostNodes(clock=lambda: now[0], lost_for_s=60)
    lost.mark("node-b")
    assert lost.names() == {"node-b"}
    assert lost.holds({"spec": {"nodeName": "node-b"}})
    assert not lost.holds({"spec": {}}) and not lost.holds(None)
    now[0] = 60
    assert lost.names() == set()
    terms = [{"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["true"]}]},
             {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    pod = {"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}}
    away = avoiding(pod, {"node-c", "node-b"})
    assert [t["matchExpressions"][-1]["values"] for t in away["spec"]["affinity"][
        "nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]] == [["node-b", "node-c"], ["node-b", "node-c"]]
    assert len(_away(pod)) == 2  # the Pod given is left as it was
    assert avoiding(pod, []) is pod
