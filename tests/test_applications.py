"""DeployApplications against real controllers (control plane only: `--runtime none`).

The build step runs for real (a child process importing tests/apps), and
the deployments it yields are checked in the store through the API.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest

from servefleet._private.testing import wait_for
from servefleet.client import ControllerClient, ControllerError
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

APPS = str(Path(__file__).parent / "apps")
AS = status_pb2.ApplicationStatus


def app(name: str = "calc", import_path: str = "graph_app:app", **fields) -> apb.ApplicationSpec:
    return apb.ApplicationSpec(name=name, import_path=import_path,
                               runtime=dpb.RuntimeOptions(working_dir=APPS, **fields.pop(
                                   "runtime", {})), **fields)


def applied(client: ControllerClient, name: str, generation: int | None = None):
    def check():
        record = next((r for r in client.applications().applications
                       if r.spec.name == name), None)
        if record is None or record.applied_generation != record.generation:
            return None
        return record if generation is None or record.generation == generation else None
    return check


def status_of(client: ControllerClient, name: str, status: int):
    def check():
        info = client.application_status(name)
        return info if info is not None and info.status == status else None
    return check


def names(client: ControllerClient, application: str) -> list[str]:
    return sorted(r.spec.name for r in client.list(application=application))


@pytest.fixture
def client(fleet):
    fleet.start(1, runtime="process")  # builds import user code: --runtime none runs none
    fleet.leader()
    with ControllerClient(fleet.addresses(), timeout=30) as c:
        yield c


def test_deploy_redeploy_and_removing_deployments(client) -> None:
    reply = client.deploy_applications([app(route_prefix="/calc")])
    assert list(reply.changed) == ["calc"]
    wait_for(applied(client, "calc"), 30, "the first build applied")
    assert names(client, "calc") == ["Adder", "Front"]
    front = client.get("Front", application="calc")
    assert front.spec.route_prefix == "/calc"
    assert '"__servefleet_handle__"' in front.spec.init_args_json

    # The same config again changes nothing.
    assert list(client.deploy_applications([app(route_prefix="/calc")]).changed) == []

    # An override from the file wins over the code's num_replicas=2.
    client.deploy_applications([app(route_prefix="/calc", deployments=[
        apb.DeploymentOverride(name="Adder", replica_config=dpb.ReplicaConfig(num_replicas=3))])])
    wait_for(applied(client, "calc", 2), 30, "generation 2 applied")
    assert client.get("Adder", application="calc").spec.replica_config.num_replicas == 3

    # A graph without Adder: Adder is deleted in the same transaction.
    client.deploy_applications([app(import_path="graph_app:hello", route_prefix="/calc")])
    wait_for(applied(client, "calc", 3), 30, "generation 3 applied")
    assert names(client, "calc") == ["hello"]

    # A config without the application deletes it, with its deployments.
    other = app(name="other", import_path="graph_app:hello", route_prefix="/other")
    assert list(client.deploy_applications([other]).deleted) == ["calc"]
    wait_for(lambda: not names(client, "calc"), 30, "calc's deployments deleted")
    wait_for(applied(client, "other"), 30, "other applied")
    assert [r.spec.name for r in client.applications().applications] == ["other"]


def test_a_bad_import_is_deploy_failed_and_a_fix_recovers(client) -> None:
    client.deploy_applications([app(import_path="no_such_module:app")])
    failed = wait_for(status_of(client, "calc", AS.APPLICATION_STATUS_DEPLOY_FAILED), 30)
    assert "ModuleNotFoundError: No module named 'no_such_module'" in failed.message
    assert names(client, "calc") == []
    # The same config again is built again: the failure may have been passing.
    assert list(client.deploy_applications([app(import_path="no_such_module:app")]).changed) \
        == ["calc"]
    wait_for(status_of(client, "calc", AS.APPLICATION_STATUS_DEPLOY_FAILED), 30)
    client.deploy_applications([app()])
    wait_for(applied(client, "calc"), 30, "the fixed application applied")
    assert names(client, "calc") == ["Adder", "Front"]


def test_a_graph_that_cannot_be_applied_is_deploy_failed(client) -> None:
    client.deploy_applications([app(deployments=[apb.DeploymentOverride(name="Missing")])])
    failed = wait_for(status_of(client, "calc", AS.APPLICATION_STATUS_DEPLOY_FAILED), 30)
    assert "overrides deployment 'Missing'" in failed.message


def test_a_working_dir_missing_here_is_deploy_failed(client) -> None:
    spec = apb.ApplicationSpec(name="calc", import_path="graph_app:app",
                               runtime=dpb.RuntimeOptions(working_dir="/nonexistent/dir"))
    client.deploy_applications([spec])
    failed = wait_for(status_of(client, "calc", AS.APPLICATION_STATUS_DEPLOY_FAILED), 30)
    assert "cannot start the build" in failed.message and "/nonexistent/dir" in failed.message


def test_a_newer_deploy_cancels_a_build_still_running(client) -> None:
    client.deploy_applications([app(import_path="slow_build_app:app",
                                    runtime={"env": {"SLOW_BUILD_S": "60"}})])
    wait_for(status_of(client, "calc", AS.APPLICATION_STATUS_DEPLOYING), 30)
    wait_for(lambda: _build_processes("slow_build_app"), 30, "the slow build running")
    client.deploy_applications([app()])
    wait_for(applied(client, "calc"), 30, "the newer generation applied")
    assert names(client, "calc") == ["Adder", "Front"]
    wait_for(lambda: not _build_processes("slow_build_app"), 10, "the old build killed")


def _build_processes(marker: str) -> list[str]:
    out = subprocess.run(["pgrep", "-af", "servefleet._private.applications.build"],
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line]


def test_an_applications_deployments_change_only_through_it(client) -> None:
    client.deploy_applications([app()])
    wait_for(applied(client, "calc"), 30, "calc applied")
    for call in (lambda: client.deploy(dpb.DeploymentSpec(name="Adder", application="calc",
                                                          import_path="graph_app:Adder")),
                 lambda: client.delete(["Adder"], application="calc")):
        with pytest.raises(ControllerError) as e:
            call()
        assert e.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "managed by DeployApplications" in e.value.details
    assert names(client, "calc") == ["Adder", "Front"]


@pytest.mark.parametrize(("applications", "code", "text"), [
    ([app(), app()], grpc.StatusCode.INVALID_ARGUMENT, "applications[1].name"),
    ([app(), app(name="b")], grpc.StatusCode.INVALID_ARGUMENT, "applications[1].route_prefix"),
    ([app(import_path="nope")], grpc.StatusCode.INVALID_ARGUMENT,
     "applications[0].import_path"),
    ([app(deployments=[apb.DeploymentOverride(
        name="Adder", replica_config=dpb.ReplicaConfig(max_ongoing_requests=0))])],
     grpc.StatusCode.INVALID_ARGUMENT,
     "applications[0].deployments[0].replica_config.max_ongoing_requests"),
])
def test_bad_requests_are_refused_and_change_nothing(client, applications, code, text) -> None:
    with pytest.raises(ControllerError) as e:
        client.deploy_applications(applications)
    assert e.value.code == code and text in e.value.details
    assert list(client.applications().applications) == []


def test_a_route_taken_by_a_deployment_is_already_exists(client) -> None:
    client.deploy(dpb.DeploymentSpec(name="solo", import_path="graph_app:hello",
                                     route_prefix="/"))
    with pytest.raises(ControllerError) as e:
        client.deploy_applications([app()], partial=True)
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS and "default/solo" in e.value.details


def test_a_build_interrupted_by_failover_is_finished_by_the_new_leader(etcd_fleet) -> None:
    etcd_fleet.start(2, lease_ttl=1.0, runtime="process")
    first = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses(), timeout=30) as client:
        client.deploy_applications([app(import_path="slow_build_app:app",
                                        runtime={"env": {"SLOW_BUILD_S": "2"}})])
        first.kill()
        record = wait_for(applied(client, "calc"), 60, "applied by the new leader")
        assert list(record.deployment_names) == ["hello"]
        assert etcd_fleet.leader() is not first


def test_a_controller_that_runs_no_user_code_builds_no_application(fleet, tmp_path) -> None:
    """--runtime none: nothing from a spec runs on the controller's host, the
    build's import included (the builder would leave a file if it ran)."""
    fleet.start(1)
    fleet.leader()
    marker = tmp_path / "built"
    with ControllerClient(fleet.addresses(), timeout=30) as client:
        with pytest.raises(ControllerError) as refused:
            client.deploy_applications([app(import_path="slow_build_app:app", runtime={
                "env": {"SLOW_BUILD_S": "0", "BUILD_MARKER": str(marker)}})])
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "runs no user code (--runtime none)" in refused.value.details
        assert client.applications().applications == []
    assert not marker.exists()
