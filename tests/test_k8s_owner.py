"""--kube-owner KIND/NAME (controller/runtime/kubernetes_owner.py): what the
Kubernetes runtime makes hangs below an object an installer owns, so that
deleting it (helm uninstall deletes the controllers' Deployment) deletes
the deployments' ConfigMaps, their Pods and the Pods' Secrets. Against the
in-memory API server of test_k8s_runtime_logic.py, whose garbage collector
deletes what names a deleted owner; test_k8s_install.py uninstalls the
chart on the real cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from test_k8s_runtime_logic import FakeKube, _launch, _start

from servefleet.controller.config import ControllerConfig
from servefleet.controller.runtime.docker import RuntimeStartError
from servefleet.controller.runtime.kubernetes import KubernetesRuntime
from servefleet.controller.runtime.kubernetes_owner import OwnerRef, parse_owner


class OwnedKube(FakeKube):
    """FakeKube with Deployments (apps/v1), merge patches, and the collector
    following owners of every kind."""

    namespace = "serving"

    def __init__(self) -> None:
        super().__init__()
        self.objects["deployments"] = {}
        self.patches: list[tuple[str, str]] = []

    async def get_named(self, api: str, plural: str, name: str) -> dict[str, Any] | None:
        assert api == "apps/v1"
        return await self.get(plural, name)

    async def patch(self, kind: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((kind, name))
        obj = self.objects[kind][name]
        obj["metadata"].update(copy.deepcopy(patch["metadata"]))
        return copy.deepcopy(obj)

    async def delete(self, kind: str, name: str, grace_s: int | None = None) -> None:
        gone = self.objects[kind].pop(name, None)
        if gone is None:
            return
        self._changed(kind, "DELETED", gone)
        for other, objects in self.objects.items():
            for dependent in list(objects.values()):
                if any(ref["uid"] == gone["metadata"]["uid"]
                       for ref in dependent["metadata"].get("ownerReferences", [])):
                    await self.delete(other, dependent["metadata"]["name"])


CONTROLLERS = "sf-servefleet-controller"


@pytest.fixture
async def owned():
    kube = OwnedKube()
    runtime = KubernetesRuntime("prod", kube, "servefleet:latest",  # type: ignore[arg-type]
                                env={}, address_timeout_s=0.5,
                                owner=OwnerRef("Deployment", CONTROLLERS))
    yield kube, runtime
    await runtime.aclose()


def test_the_flag_names_a_kind_and_an_object() -> None:
    assert parse_owner("Deployment/sf-servefleet-controller") == OwnerRef(
        "Deployment", "sf-servefleet-controller")
    assert parse_owner("statefulset/db").kind == "StatefulSet"
    for text, problem in (("sf-servefleet-controller", "expected KIND/NAME"),
                          ("Pod/x", "expected KIND/NAME, KIND one of Deployment, StatefulSet"),
                          ("Deployment/Controllers", "'Controllers' is not an object's name")):
        with pytest.raises(ValueError, match=f"^--kube-owner {text!r}: {problem}"):
            parse_owner(text)


def test_the_controller_refuses_it_by_name_and_without_kubernetes() -> None:
    with pytest.raises(ValueError, match=r"^--kube-owner 'Deployment': expected KIND/NAME"):
        ControllerConfig(store_url="sqlite:///x.db", runtime="kubernetes",
                         kube_owner="Deployment").validate()
    with pytest.raises(ValueError, match=r"^--kube-owner Deployment/x: for --runtime "
                                         r"kubernetes \(this controller's is process\)"):
        ControllerConfig(store_url="sqlite:///x.db", kube_owner="Deployment/x").validate()


async def test_deleting_the_owner_deletes_the_configmaps_pods_and_secrets(owned) -> None:
    kube, runtime = owned
    deployment = await kube.create("deployments", {"metadata": {"name": CONTROLLERS}})
    await _start(runtime, kube, _launch("r1"), "10.234.1.5")
    await _start(runtime, kube, _launch("o1", deployment="Other"), "10.234.1.6")
    assert len(kube.objects["configmaps"]) == 2
    for config_map in kube.objects["configmaps"].values():
        assert config_map["metadata"]["ownerReferences"] == [{
            "apiVersion": "apps/v1", "kind": "Deployment", "name": CONTROLLERS,
            "uid": deployment["metadata"]["uid"]}]
    await kube.delete("deployments", CONTROLLERS)
    assert kube.objects["configmaps"] == kube.objects["pods"] == kube.objects["secrets"] == {}


async def test_a_configmap_made_without_it_is_given_it_and_keeps_its_other_owners(
        owned) -> None:
    kube, runtime = owned
    deployment = await kube.create("deployments", {"metadata": {"name": CONTROLLERS}})
    plain = KubernetesRuntime("prod", kube, "servefleet:latest",  # type: ignore[arg-type]
                              env={}, address_timeout_s=0.5)
    try:
        await _start(plain, kube, _launch("r1"), "10.234.1.5")  # an earlier controller's
    finally:
        await plain.aclose()
    (name,) = kube.objects["configmaps"]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "someone-else"}
    kube.objects["configmaps"][name]["metadata"]["ownerReferences"] = [other]
    await _start(runtime, kube, _launch("r2"), "10.234.1.6")
    assert kube.objects["configmaps"][name]["metadata"]["ownerReferences"] == [
        other, {"apiVersion": "apps/v1", "kind": "Deployment", "name": CONTROLLERS,
                "uid": deployment["metadata"]["uid"]}]
    await _start(runtime, kube, _launch("r3"), "10.234.1.7")
    assert kube.patches == [("configmaps", name)]  # once: the next start finds it owned


async def test_an_owner_that_is_not_there_fails_the_start_naming_the_flag(owned) -> None:
    kube, runtime = owned
    with pytest.raises(RuntimeStartError, match=r"^--kube-owner Deployment/"
                       f"{CONTROLLERS}: no Deployment '{CONTROLLERS}' in the namespace serving"):
        await runtime.start(_launch("r1"))
    assert kube.objects["configmaps"] == kube.objects["pods"] == {}


async def test_an_owner_made_again_is_read_again(owned) -> None:
    """The uid is read when a ConfigMap is made, not kept: a ConfigMap naming
    the uid of an owner that is gone would be deleted by the collector."""
    kube, runtime = owned
    await kube.create("deployments", {"metadata": {"name": CONTROLLERS}})
    await _start(runtime, kube, _launch("r1"), "10.234.1.5")
    await kube.delete("deployments", CONTROLLERS)
    again = await kube.create("deployments", {"metadata": {"name": CONTROLLERS}})
    await _start(runtime, kube, _launch("r2"), "10.234.1.6")
    (config_map,) = kube.objects["configmaps"].values()
    assert config_map["metadata"]["ownerReferences"][0]["uid"] == again["metadata"]["uid"]


async def test_prune_gives_it_to_the_configmaps_of_running_deployments(owned) -> None:
    """After an upgrade from a chart without --kube-owner, the deployments
    that start nothing new are owned too once the runtime prunes (every 30 s)."""
    kube, runtime = owned
    await kube.create("deployments", {"metadata": {"name": CONTROLLERS}})
    plain = KubernetesRuntime("prod", kube, "servefleet:latest",  # type: ignore[arg-type]
                              env={}, address_timeout_s=0.5)
    try:
        await _start(plain, kube, _launch("r1"), "10.234.1.5")
    finally:
        await plain.aclose()
    assert await runtime.prune("prod", keep={"r1"}) == []
    await kube.delete("deployments", CONTROLLERS)
    assert kube.objects["configmaps"] == kube.objects["pods"] == kube.objects["secrets"] == {}
