"""The Kubernetes runtime's own logic (controller/runtime/kubernetes.py)
against an API server in memory: the owner ConfigMap made before the first
Pod and deleted with the last (never while the API server lists a Pod the
watch has not shown yet), a start that waits for the Pod's IP and deletes a
Pod that gets none in time, naming why, a retried start, and a ConfigMap of
that name that is not the deployment's refused. tests/test_k8s_runtime.py
runs the same on the real API server."""

from __future__ import annotations

import asyncio
import copy
import itertools
from typing import Any

import pytest

from servefleet.controller.runtime.base import ReplicaLaunch
from servefleet.controller.runtime.docker import RuntimeStartError
from servefleet.controller.runtime.kubernetes import KubernetesRuntime
from servefleet.controller.runtime.kubernetes_api import ApiError
from servefleet.controller.runtime.kubernetes_pods import owner_name

KINDS = ("pods", "secrets", "configmaps")


class FakeKube:
    """Objects by kind and name with uids and resourceVersions, a Pod watch
    fed from a queue, and the garbage collector: deleting an object deletes
    what names it in ownerReferences."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, dict[str, Any]]] = {k: {} for k in KINDS}
        self.versions = itertools.count(1)
        self.uids = itertools.count(1)
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

    def _changed(self, kind: str, event: str, obj: dict[str, Any], quiet: bool = False) -> None:
        obj["metadata"]["resourceVersion"] = str(next(self.versions))
        if kind == "pods" and not quiet:
            self.events.put_nowait({"type": event, "object": copy.deepcopy(obj)})

    async def create(self, kind: str, obj: dict[str, Any], quiet: bool = False
                     ) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.objects[kind]:
            raise ApiError(409, f'{kind} "{name}" already exists')
        made = copy.deepcopy(obj)
        made["metadata"]["uid"] = f"uid-{next(self.uids)}"
        self.objects[kind][name] = made
        self._changed(kind, "ADDED", made, quiet)
        return copy.deepcopy(made)

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.objects[kind].get(name))

    async def delete(self, kind: str, name: str, grace_s: int | None = None) -> None:
        gone = self.objects[kind].pop(name, None)
        if gone is None:
            return
        self._changed(kind, "DELETED", gone)
        for other in KINDS:
            for dependent in list(self.objects[other].values()):
                if any(ref["uid"] == gone["metadata"]["uid"]
                       for ref in dependent["metadata"].get("ownerReferences", [])):
                    await self.delete(other, dependent["metadata"]["name"])

    async def list_objects(self, kind: str, selector: str) -> list[dict[str, Any]]:
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        return [copy.deepcopy(o) for o in self.objects[kind].values()
                if wanted.items() <= o["metadata"].get("labels", {}).items()]

    async def list_pods(self, selector: str) -> tuple[list[dict[str, Any]], str]:
        return await self.list_objects("pods", selector), str(next(self.versions))

    async def watch_pods(self, selector: str, resource_version: str):
        while True:
            yield await self.events.get()

    def pod_log(self, name: str, tail_lines: int = 0, since_time: str = "") -> str:
        return ""

    def set_status(self, name: str, status: dict[str, Any]) -> None:
        pod = self.objects["pods"][name]
        pod["status"] = status
        self._changed("pods", "MODIFIED", pod)


def _launch(replica_id: str, deployment: str = "Echo") -> ReplicaLaunch:
    return ReplicaLaunch(cluster="prod", application="app", deployment=deployment,
                         replica_id=replica_id, version="v1",
                         settings={"token": "t", "graceful_shutdown_timeout_s": 1.0})


async def _start(runtime: KubernetesRuntime, kube: FakeKube, launch: ReplicaLaunch,
                 ip: str):
    """Start a replica; the fake schedules its Pod once it is there."""
    starting = asyncio.create_task(runtime.start(launch))
    name = f"servefleet-prod-{launch.replica_id}"
    while name not in kube.objects["pods"] or name not in kube.objects["secrets"]:
        assert not starting.done(), starting.result()
        await asyncio.sleep(0.01)
    kube.set_status(name, {"phase": "Running", "podIP": ip})
    return await asyncio.wait_for(starting, 5)


@pytest.fixture
async def kube_runtime():
    kube = FakeKube()
    runtime = KubernetesRuntime("prod", kube, "servefleet:latest",  # type: ignore[arg-type]
                                env={}, address_timeout_s=0.5)
    yield kube, runtime
    await runtime.aclose()


async def test_start_makes_the_owner_the_pod_and_its_secret_and_waits_for_the_ip(
        kube_runtime) -> None:
    kube, runtime = kube_runtime
    replica = await _start(runtime, kube, _launch("r1"), "10.234.1.5")
    assert (replica.handle, replica.control_address) == ("servefleet-prod-r1", "10.234.1.5:7400")
    (owner,) = kube.objects["configmaps"].values()
    pod, secret = kube.objects["pods"]["servefleet-prod-r1"], kube.objects["secrets"][
        "servefleet-prod-r1"]
    assert pod["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert secret["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    # The same deployment's next replica has the same owner; another deployment its own.
    await _start(runtime, kube, _launch("r2"), "10.234.1.6")
    await _start(runtime, kube, _launch("o1", deployment="Other"), "10.234.1.7")
    assert len(kube.objects["configmaps"]) == 2
    assert kube.objects["pods"]["servefleet-prod-r2"]["metadata"]["ownerReferences"][0][
        "uid"] == owner["metadata"]["uid"]


async def test_the_owner_goes_with_the_last_pod_and_takes_its_pods_with_it(
        kube_runtime) -> None:
    kube, runtime = kube_runtime
    for i in (1, 2):
        await _start(runtime, kube, _launch(f"r{i}"), f"10.234.1.{i}")
    (owner,) = kube.objects["configmaps"]
    await runtime.stop("servefleet-prod-r1", 1)
    assert owner in kube.objects["configmaps"]  # r2 is still its
    # A Pod the API server has and the watch has not shown yet keeps it too.
    racing = copy.deepcopy(kube.objects["pods"]["servefleet-prod-r2"])
    racing["metadata"]["name"] = "servefleet-prod-r3"
    await kube.create("pods", racing, quiet=True)
    await runtime.stop("servefleet-prod-r2", 1)
    assert owner in kube.objects["configmaps"]
    await kube.delete("pods", "servefleet-prod-r3")
    assert await runtime.prune("prod", keep=set()) == []
    assert kube.objects["configmaps"] == {}  # the owner of no Pod, pruned
    # Deleting the owner in Kubernetes deletes the deployment's Pods and Secrets.
    await _start(runtime, kube, _launch("r4"), "10.234.1.4")
    await kube.delete("configmaps", next(iter(kube.objects["configmaps"])))
    assert kube.objects["pods"] == kube.objects["secrets"] == {}


async def test_a_pod_without_an_address_in_time_is_deleted_and_the_start_says_why(
        kube_runtime) -> None:
    kube, runtime = kube_runtime
    starting = asyncio.create_task(runtime.start(_launch("r1")))
    while "servefleet-prod-r1" not in kube.objects["pods"]:
        await asyncio.sleep(0.01)
    kube.set_status("servefleet-prod-r1", {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/2 nodes are available: 2 Insufficient cpu."}]})
    with pytest.raises(RuntimeStartError, match=r"Pod servefleet-prod-r1 got no address "
                       r"within 0 s \(Unschedulable: 0/2 nodes are available: 2 Insufficient "
                       r"cpu\.\); deleted it"):
        await starting
    assert kube.objects["pods"] == kube.objects["secrets"] == {}


async def test_a_container_that_will_not_start_is_gone_and_its_logs_say_why(
        kube_runtime) -> None:
    kube, runtime = kube_runtime
    replica = await _start(runtime, kube, _launch("r1"), "10.234.1.5")
    kube.set_status(replica.handle, {"phase": "Pending", "podIP": "10.234.1.5",
                                     "containerStatuses": [{"name": "replica", "state": {
                                         "waiting": {"reason": "ErrImageNeverPull",
                                                     "message": "not present"}}}]})
    for _ in range(500):
        if not (await runtime.inspect(replica.handle)).alive:
            break
        await asyncio.sleep(0.01)
    assert await runtime.list("prod") == []
    assert await asyncio.to_thread(runtime.logs, "r1") == (
        "(the container has not started: ErrImageNeverPull: not present)")


async def test_a_retried_start_goes_on_with_the_pod_there(kube_runtime) -> None:
    kube, runtime = kube_runtime
    first = await _start(runtime, kube, _launch("r1"), "10.234.1.5")
    await kube.delete("secrets", "servefleet-prod-r1")  # the first start died before it
    again = await runtime.start(_launch("r1"))
    assert again.handle == first.handle and again.control_address == "10.234.1.5:7400"
    assert "servefleet-prod-r1" in kube.objects["secrets"]
    assert len(kube.objects["pods"]) == 1


async def test_a_configmap_of_that_name_that_is_not_the_owner_is_refused(kube_runtime) -> None:
    kube, runtime = kube_runtime
    name = owner_name("prod", "app", "Echo")
    await kube.create("configmaps", {"metadata": {"name": name}, "data": {"mine": "yes"}})
    with pytest.raises(RuntimeStartError, match=f"the ConfigMap {name} is not this "
                                                "deployment's owner"):
        await runtime.start(_launch("r1"))
    assert kube.objects["pods"] == {}
