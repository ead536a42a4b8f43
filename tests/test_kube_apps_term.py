"""The ServeApplication reconciler in real leader terms (sqlite in memory,
fake clock, runtime and build step) over an in-memory ServeApplications
API: objects applied through ApplicationTable with their ownership
recorded, statuses written back, conflicts with applications deployed by
other means, invalid specs that change nothing, and deletions, including
one made while no controller led."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from fakes import FakeControlPlane
from test_application_builds import until

from servefleet.controller.reconcile.builder import BuildResult
from servefleet.controller.runtime.kubernetes_api import ApiError
from servefleet.controller.term import LeaderTerm
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api

NS = "serving"


async def build(spec: apb.ApplicationSpec) -> BuildResult:
    return BuildResult({"ingress": "Front", "deployments": [
        {"name": "Front", "import_path": "shop:Front", "options": {"num_replicas": 1}}]})


class Objects:
    """ServeApplications in memory, with resourceVersions, watch events and
    the status subresource's conflict rule."""

    namespace = NS

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 1
        self.events: list[dict[str, Any]] = []
        self.status_writes = 0

    def _bump(self, obj: dict[str, Any], kind: str) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.events.append({"type": kind, "object": copy.deepcopy(obj)})

    def apply(self, object_name: str, **spec: Any) -> None:
        name = object_name
        current = self.objects.get(name)
        meta: dict[str, Any] = current["metadata"] if current else {
            "name": name, "uid": f"uid-{name}-{self.version}", "generation": 0,
            "creationTimestamp": f"2026-12-07T10:00:{self.version:02d}Z"}
        meta["generation"] += 1
        obj = {"metadata": meta, "spec": {"import_path": "shop:app", **spec},
               "status": current.get("status") if current else None}
        self.objects[name] = obj
        self._bump(obj, "MODIFIED" if current else "ADDED")

    def delete(self, name: str) -> None:
        self._bump(self.objects.pop(name), "DELETED")

    def status(self, name: str) -> dict[str, Any]:
        return self.objects[name].get("status") or {}

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        self.events.clear()
        return copy.deepcopy(list(self.objects.values())), str(self.version)

    async def watch(self, resource_version: str) -> AsyncGenerator[dict[str, Any], None]:
        while self.events:  # then the stream ends, as the API server's do
            yield self.events.pop(0)

    async def write_status(self, obj: dict[str, Any]) -> None:
        current = self.objects.get(obj["metadata"]["name"])
        if current is None:
            raise ApiError(404, "not found")
        if current["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        current["status"] = copy.deepcopy(obj["status"])
        self.status_writes += 1
        self._bump(current, "MODIFIED")


@pytest.fixture
async def world():
    w = FakeControlPlane(build=build)
    yield w
    await w.close()


async def lead(world: FakeControlPlane, objects: Objects) -> LeaderTerm:
    """A new leader term with --kube-applications (the previous one resigned)."""
    return await world.lead(kube_applications=objects)


def live(term: LeaderTerm) -> list[str]:
    return [r.spec.name for r in term.applications.live()]


async def owner(world: FakeControlPlane, application: str) -> dict[str, str] | None:
    found = await world.store.get(f"{world.keys.root}kube-applications/{application}")
    return json.loads(found.value) if found is not None else None


async def test_an_object_is_applied_recorded_and_its_status_written(world) -> None:
    objects = Objects()
    objects.apply("shop", deployments=[{"name": "Front", "num_replicas": 1}])
    term = await lead(world, objects)
    await until(world, term, lambda: objects.status("shop").get("phase") == "RUNNING")
    assert live(term) == ["shop"]
    record = term.applications.record("shop")
    assert record is not None and record.spec.deployments[0].name == "Front"
    assert await owner(world, "shop") == {"namespace": NS, "name": "shop",
                                          "uid": objects.objects["shop"]["metadata"]["uid"]}
    status = objects.status("shop")
    assert (status["replicas"], status["observedGeneration"]) == ("1/1", 1)
    writes = objects.status_writes
    for _ in range(30):  # nothing changes: nothing more is written or deployed
        world.clock.advance(0.1)
        await term.loop.run_pass()
        await asyncio.sleep(0.005)
    assert objects.status_writes == writes and term.applications.record("shop").generation == 1

    # A new generation of the spec is applied.
    objects.apply("shop", deployments=[{"name": "Front", "num_replicas": 1,
                                        "user_config": {"a": 1}}])
    await until(world, term, lambda: objects.status("shop").get("observedGeneration") == 2
                and objects.status("shop")["phase"] == "RUNNING")
    assert term.applications.record("shop").generation == 2


async def test_an_invalid_spec_changes_nothing_and_names_the_field(world) -> None:
    objects = Objects()
    objects.apply("shop")
    term = await lead(world, objects)
    await until(world, term, lambda: objects.status("shop").get("phase") == "RUNNING")
    objects.apply("shop", deployments=[{"name": "Front", "max_ongoing_requests": 0}])
    await until(world, term, lambda: objects.status("shop").get("phase") == "INVALID")
    ready = objects.status("shop")["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert ready["message"].startswith("spec.deployments[0].max_ongoing_requests:")
    assert term.applications.record("shop").generation == 1 and live(term) == ["shop"]


async def test_an_application_deployed_by_other_means_is_left_alone(world) -> None:
    objects = Objects()
    term = await lead(world, objects)
    await term.applications.deploy(api.DeployApplicationsRequest(applications=[
        apb.ApplicationSpec(name="shop", import_path="shop:other")], partial=True))
    objects.apply("shop")
    await until(world, term, lambda: objects.status("shop").get("phase") == "CONFLICT")
    assert objects.status("shop")["message"].startswith(
        "application shop was deployed by other means")
    assert term.applications.record("shop").spec.import_path == "shop:other"
    assert await owner(world, "shop") is None
    objects.delete("shop")  # and deleting the object leaves it alone too
    for _ in range(20):
        world.clock.advance(0.1)
        await term.loop.run_pass()
        await asyncio.sleep(0.005)
    assert live(term) == ["shop"]


async def test_deleting_the_object_deletes_the_application_and_its_record(world) -> None:
    objects = Objects()
    objects.apply("shop")
    objects.apply("cart", name="basket")
    term = await lead(world, objects)
    await until(world, term, lambda: sorted(live(term)) == ["basket", "shop"])
    objects.delete("shop")
    await until(world, term, lambda: live(term) == ["basket"])
    await until(world, term, lambda: term.applications.record("shop") is None)
    assert await owner(world, "shop") is None and await owner(world, "basket") is not None


async def test_an_object_deleted_while_no_controller_led_is_released_by_the_next(world) -> None:
    objects = Objects()
    objects.apply("shop")
    term = await lead(world, objects)
    await until(world, term, lambda: objects.status("shop").get("phase") == "RUNNING")
    await term.stop()
    objects.delete("shop")
    term = await lead(world, objects)
    assert live(term) == ["shop"]
    await until(world, term, lambda: live(term) == [])
    assert await owner(world, "shop") is None


async def test_a_deploy_the_controller_refuses_is_shown_and_tried_again_later(world) -> None:
    objects = Objects()
    term = await lead(world, objects)
    await term.applications.deploy(api.DeployApplicationsRequest(applications=[
        apb.ApplicationSpec(name="other", import_path="shop:app", route_prefix="/shop")],
        partial=True))
    await until(world, term, lambda: term.applications.record("other").applied_generation == 1)
    objects.apply("shop", route_prefix="/shop")
    await until(world, term, lambda: objects.status("shop").get("phase") == "INVALID")
    ready = objects.status("shop")["conditions"][0]
    assert (ready["reason"], ready["message"]) == (
        "Rejected", "spec.route_prefix: '/shop' is already served by deployment other/Front")
    assert live(term) == ["other"]
    # Tried again every REFUSED_RETRY_S (30 s), refused again: nothing new to say.
    writes, tries = objects.status_writes, term.applications.record("other").generation
    for _ in range(400):
        world.clock.advance(0.1)
        await term.loop.run_pass()
        await asyncio.sleep(0)
    assert objects.status_writes == writes and objects.status("shop")["phase"] == "INVALID"
    assert term.applications.record("other").generation == tries
    await term.applications.delete(["other"])
    await until(world, term, lambda: objects.status("shop").get("phase") == "RUNNING",
                passes=600)
    assert live(term) == ["shop"]
