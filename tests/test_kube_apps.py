"""ServeApplications' pure parts (controller/kube_apps/): an object read as
an application spec, the ownership rules of a pass, the status written
back, and the watch cache's listing, events and relist after 410 Gone (over
a fake API). The whole, on a real API server: tests/test_kube_apps_cluster.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from servefleet.controller.kube_apps.cache import ObjectCache
from servefleet.controller.kube_apps.objects import ServeApp, read_object
from servefleet.controller.kube_apps.ownership import Applied, Owner, plan
from servefleet.controller.kube_apps.status import Known, build_status
from servefleet.controller.runtime.kubernetes_api import ApiError
from servefleet.v1 import status_pb2

NS = "serving"


def obj(object_name: str = "echo", uid: str = "u1", generation: int = 1,
        created: str = "2026-12-07T10:00:00Z", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": object_name, "uid": uid, "generation": generation,
                         "creationTimestamp": created, "resourceVersion": "1"},
            "spec": {"import_path": "echo_app:app", **spec}}


# -- an object read as an application ------------------------------------------------


def test_the_application_is_named_after_the_object_unless_the_spec_names_it() -> None:
    read = read_object(obj(route_prefix=None, deployments=[{"name": "Echo",
                                                              "num_replicas": "auto"}]))
    assert (read.application, read.error, read.generation) == ("echo", "", 1)
    assert read.spec is not None and read.spec.name == "echo" and read.spec.no_route
    assert read.spec.deployments[0].replica_config.HasField("autoscaling_config")
    named = read_object(obj("web", name="shop"))
    assert named.application == "shop" and named.spec is not None


def test_a_refused_spec_names_the_field_from_spec() -> None:
    def error(**spec: Any) -> str:
        read = read_object(obj(**spec))
        assert read.spec is None
        return read.error

    assert error(deployments=[{"name": "Echo", "num_replicas": "two"}]) == \
        "spec.deployments[0].num_replicas: expected an integer, got 'two'"
    assert error(import_path="not a path") == \
        "spec.import_path: must look like 'package.module:attribute', got 'not a path'"
    assert error(unknown=1).startswith("spec.unknown: unknown key")
    assert error(runtime={"working_dir": "code"}) == (
        "spec.runtime.working_dir: must be an absolute path ('code'): a ServeApplication has "
        "no file for it to be relative to")
    assert error(deployments=[{"name": "E", "runtime_env": {"working_dir": "x"}}]).startswith(
        "spec.deployments[0].runtime_env.working_dir: must be an absolute path")
    assert read_object({"metadata": {"name": "e"}, "spec": None}).error == \
        "spec: expected a mapping of an application's keys"


def test_an_object_name_that_is_no_application_name_asks_for_spec_name() -> None:
    read = read_object(obj("shop.v2"))
    assert read.spec is None and read.error.startswith(
        "metadata.name: 'shop.v2' is no application name (must be 1-63 letters")
    assert read.error.endswith("give spec.name")
    assert read_object(obj("shop.v2", name="shop")).spec is not None


def test_ray_keys_warn_with_the_path_from_spec() -> None:
    read = read_object(obj(deployments=[{"name": "E", "max_concurrent_queries": 3}]))
    assert read.spec is not None
    assert read.warnings == ("spec.deployments[0].max_concurrent_queries: deprecated, use "
                             "max_ongoing_requests",)


# -- ownership -------------------------------------------------------------------------


def app(name: str = "echo", uid: str = "u1", generation: int = 1, application: str = "",
        created: str = "2026-12-07T10:00:00Z", valid: bool = True) -> ServeApp:
    read = read_object(obj(name, uid, generation, created))
    spec = read.spec if valid else None
    application = application or name
    if spec is not None:
        spec.name = application
    return ServeApp(name, uid, generation, created, application, spec,
                    "" if valid else "spec.x: bad")


def test_a_new_object_is_deployed_and_recorded_then_left_alone_once_applied() -> None:
    first = plan(NS, [app()], {}, {}, {})
    assert list(first.deploy) == ["echo"] and first.holds == {"echo": "echo"}
    assert first.deploy["echo"].owner == Owner(NS, "echo", "u1")
    owners = {"echo": Owner(NS, "echo", "u1")}
    done = plan(NS, [app()], owners, {"echo": 4}, {"echo": Applied("u1", 1, 4)})
    assert (done.deploy, done.release, done.conflicts) == ({}, {}, {})


def test_a_new_generation_or_a_change_by_other_means_is_applied_again() -> None:
    owners = {"echo": Owner(NS, "echo", "u1")}
    applied = {"echo": Applied("u1", 1, 4)}
    assert list(plan(NS, [app(generation=2)], owners, {"echo": 4}, applied).deploy) == ["echo"]
    # Deleted (servefleet delete, a config deploy), or redeployed by other means:
    assert list(plan(NS, [app()], owners, {}, applied).deploy) == ["echo"]
    assert list(plan(NS, [app()], owners, {"echo": 5}, applied).deploy) == ["echo"]
    # Refused before anything was stored: not tried again until the object changes.
    assert plan(NS, [app()], owners, {}, {"echo": Applied("u1", 1, 0)}).deploy == {}


def test_an_application_deployed_by_other_means_is_left_alone() -> None:
    out = plan(NS, [app()], {}, {"echo": 3}, {})
    assert (out.deploy, out.release, out.holds) == ({}, {}, {})
    assert out.conflicts["echo"].startswith("application echo was deployed by other means")
    foreign = plan(NS, [app()], {"echo": Owner("other", "echo", "u9")}, {"echo": 3}, {})
    assert foreign.deploy == {} and "namespace other" in foreign.conflicts["echo"]
    assert foreign.release == {}  # another namespace's record is not this one's to release


def test_of_two_objects_naming_one_application_the_owner_or_the_oldest_has_it() -> None:
    old = app("a", "ua", application="shop", created="2026-12-07T09:00:00Z")
    new = app("b", "ub", application="shop", created="2026-12-07T10:00:00Z")
    out = plan(NS, [new, old], {}, {}, {})
    assert out.deploy["shop"].obj.name == "a" and out.holds == {"a": "shop"}
    assert out.conflicts == {"b": "application shop belongs to ServeApplication a; name "
                                  "another one in spec.name"}
    owned = plan(NS, [new, old], {"shop": Owner(NS, "b", "ub")}, {"shop": 1},
                 {"shop": Applied("ub", 1, 1)})
    assert owned.deploy == {} and owned.holds == {"b": "shop"} and "a" in owned.conflicts


def test_an_object_deleted_releases_its_application_and_one_recreated_takes_it_over() -> None:
    owners = {"echo": Owner(NS, "echo", "u1")}
    gone = plan(NS, [], owners, {"echo": 2}, {})
    assert gone.release["echo"].live and gone.deploy == {}
    # Deleted and made again (a new uid) before a pass saw it: no deletion.
    again = plan(NS, [app(uid="u2")], owners, {"echo": 2}, {"echo": Applied("u1", 1, 2)})
    assert again.release == {} and again.deploy["echo"].owner == Owner(NS, "echo", "u2")
    # Renamed: the old application is released, the new one deployed.
    renamed = plan(NS, [app(application="echo2")], owners, {"echo": 2}, {})
    assert list(renamed.release) == ["echo"] and list(renamed.deploy) == ["echo2"]


def test_an_invalid_spec_keeps_the_application_its_object_owns() -> None:
    owners = {"echo": Owner(NS, "echo", "u1")}
    out = plan(NS, [app(generation=2, valid=False)], owners, {"echo": 2}, {})
    assert (out.deploy, out.release, out.holds) == ({}, {}, {"echo": "echo"})
    # Invalid from the start: it holds nothing and nothing happens.
    assert plan(NS, [app(valid=False)], {}, {}, {}).holds == {}


# -- status ----------------------------------------------------------------------------------


def info(status: status_pb2.ApplicationStatus = status_pb2.APPLICATION_STATUS_RUNNING,
         message: str = "") -> status_pb2.ApplicationStatusInfo:
    return status_pb2.ApplicationStatusInfo(name="echo", status=status, message=message,
                                            deployments=[
        status_pb2.DeploymentStatusInfo(name="A", status=status_pb2.DEPLOYMENT_STATUS_HEALTHY,
                                        replica_states={"RUNNING": 2}, target_replicas=2),
        status_pb2.DeploymentStatusInfo(name="B", status=status_pb2.DEPLOYMENT_STATUS_UPDATING,
                                        replica_states={"STARTING": 1}, target_replicas=1,
                                        message="starting")])


NOW, LATER = "2026-12-07T10:00:00Z", "2026-12-07T10:05:00Z"


def test_a_running_application_is_ready_with_its_deployments_replicas() -> None:
    status = build_status(app(generation=3), Known("echo", applied_generation=3, app=info()),
                          None, NOW)
    assert (status["phase"], status["replicas"], status["observedGeneration"]) == \
        ("RUNNING", "2/3", 3)
    assert (status["readyReplicas"], status["targetReplicas"]) == (2, 3)
    assert status["deployments"][1] == {"name": "B", "status": "UPDATING", "readyReplicas": 0,
                                        "targetReplicas": 1, "message": "starting"}
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"] == {"type": "Ready", "status": "True", "reason": "Running",
                                   "message": "", "lastTransitionTime": NOW,
                                   "observedGeneration": 3}
    assert [(c["type"], c["status"]) for c in status["conditions"][1:]] == [
        ("Progressing", "False"), ("Reconciling", "False"), ("Stalled", "False")]


def test_a_generation_not_yet_applied_is_deploying_at_the_last_one_applied() -> None:
    status = build_status(app(generation=4), Known("echo", applied_generation=3, app=info()),
                          None, NOW)
    assert (status["phase"], status["observedGeneration"]) == ("DEPLOYING", 3)
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"Ready": "False", "Progressing": "True", "Reconciling": "True",
                          "Stalled": "False"}
    assert "observedGeneration" not in build_status(app(), Known(), None, NOW)


def test_invalid_refused_and_conflicting_objects_say_why() -> None:
    invalid = build_status(app(generation=5, valid=False),
                           Known("echo", applied_generation=4, app=info()), None, NOW)
    assert (invalid["phase"], invalid["message"], invalid["observedGeneration"]) == \
        ("INVALID", "spec.x: bad", 5)
    assert invalid["conditions"][0]["reason"] == "InvalidSpec"
    assert [c["status"] for c in invalid["conditions"]] == ["False", "False", "False", "True"]
    assert invalid["replicas"] == "2/3"  # what still runs
    refused = build_status(app(), Known("echo", refused="spec.route_prefix: taken"), None, NOW)
    assert (refused["phase"], refused["conditions"][0]["reason"]) == ("INVALID", "Rejected")
    conflict = build_status(app(), Known(conflict="application echo belongs to x"), None, NOW)
    assert (conflict["phase"], conflict["message"], conflict["replicas"]) == \
        ("CONFLICT", "application echo belongs to x", "0/0")


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    first = build_status(app(), Known("echo", applied_generation=1, app=info()), None, NOW)
    same = build_status(app(), Known("echo", applied_generation=1,
                                     app=info(message="still")), first, LATER)
    assert [c["lastTransitionTime"] for c in same["conditions"]] == [NOW] * 4
    failed = build_status(app(), Known("echo", applied_generation=1, app=info(
        status_pb2.APPLICATION_STATUS_DEPLOY_FAILED, "import failed")), first, LATER)
    ready = failed["conditions"][0]
    assert (ready["status"], ready["reason"], ready["message"], ready["lastTransitionTime"]) \
        == ("False", "DeployFailed", "import failed", LATER)
    assert failed["conditions"][1]["lastTransitionTime"] == NOW  # Progressing stayed False
    assert failed["conditions"][3]["lastTransitionTime"] == LATER  # Stalled now


# -- the watch cache -----------------------------------------------------------------------


class FakeObjects:
    namespace = NS

    def __init__(self) -> None:
        self.listings: list[tuple[list[dict[str, Any]], str]] = []
        self.streams: list[list[dict[str, Any]] | Exception] = []
        self.watched_from: list[str] = []

    async def list(self) -> tuple[list[dict[str, Any]], str]:
        return self.listings.pop(0)

    async def watch(self, resource_version: str) -> AsyncGenerator[dict[str, Any], None]:
        self.watched_from.append(resource_version)
        stream = self.streams.pop(0)
        if isinstance(stream, Exception):
            raise stream
        for event in stream:
            yield event

    async def write_status(self, obj: dict[str, Any]) -> None:
        raise AssertionError("not here")


def event(kind: str, name: str, version: str) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": name, "resourceVersion": version}}}


def test_the_cache_lists_watches_from_there_and_lists_again_after_410() -> None:
    api = FakeObjects()
    api.listings = [([obj("a"), obj("b")], "10"), ([obj("c")], "30")]
    api.streams = [[event("ADDED", "d", "11"), event("DELETED", "a", "12"),
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}],
                   [{"type": "ERROR", "object": {"code": 410, "message": "too old"}}],
                   [event("MODIFIED", "c", "31")]]
    cache = ObjectCache(api)
    assert not cache.synced
    asyncio.run(cache.sync())  # list, then the stream until it ends
    assert sorted(cache.objects) == ["b", "d"] and cache.resource_version == "15"
    asyncio.run(cache.sync())  # no new listing: the watch goes on from 15, and is Gone
    assert api.watched_from == ["10", "15"] and cache.lists == 1
    asyncio.run(cache.sync())  # listed again: what was deleted meanwhile is gone
    assert sorted(cache.objects) == ["c"] and cache.lists == 2
    assert api.watched_from[-1] == "30" and cache.resource_version == "31"


def test_a_failed_watch_raises_for_the_loop_to_back_off_and_then_lists_again() -> None:
    api = FakeObjects()
    api.listings = [([obj("a")], "10"), ([], "20")]
    api.streams = [OSError("connection reset"), []]
    cache = ObjectCache(api)
    with pytest.raises(OSError):
        asyncio.run(cache.sync())
    asyncio.run(cache.sync())
    assert cache.lists == 2 and cache.objects == {}


def test_a_missing_crd_is_named() -> None:
    api = FakeObjects()

    async def missing() -> tuple[list[dict[str, Any]], str]:
        raise ApiError(404, "the server could not find the requested resource")

    api.list = missing  # type: ignore[method-assign]
    with pytest.raises(ApiError, match=r"install the CRD \(servefleet config crd"):
        asyncio.run(ObjectCache(api).sync())


def test_the_flag_is_refused_with_a_controller_that_builds_nothing() -> None:
    from servefleet.controller.config import ControllerConfig

    config = ControllerConfig(store_url="sqlite:///x.db", runtime="none", kube_applications=True)
    with pytest.raises(ValueError, match=r"^--kube-applications: --runtime none builds no "):
        config.validate()
    ControllerConfig(store_url="sqlite:///x.db", runtime="sim", kube_applications=True).validate()
