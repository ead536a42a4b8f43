"""The controller API over real gRPC, against a controller process on each store."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from servefleet.client import ControllerClient, ControllerError
from servefleet.controller.store import open_store
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, status_pb2
from servefleet.v1 import deployment_pb2 as d


def spec(name: str = "Model", **fields) -> d.DeploymentSpec:
    fields.setdefault("import_path", "examples.model:Model")
    return d.DeploymentSpec(name=name, **fields)


def store_revision(url: str) -> int:
    async def read() -> int:
        store = open_store(url)
        try:
            return await store.revision()
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.fixture
def client(fleet) -> Iterator[ControllerClient]:
    fleet.start(1)
    fleet.leader()
    with ControllerClient(fleet.addresses(), timeout=20) as c:
        yield c


def test_deploy_get_list_delete_round_trip(client: ControllerClient) -> None:
    reply = client.deploy(spec(
        route_prefix="/model", version="v1",
        replica_config=d.ReplicaConfig(num_replicas=2, user_config_json='{"b": 1, "a": [1]}')))
    assert reply.version == "v1" and reply.updating

    record = client.get("Model")
    assert record.spec.application == "default"
    assert record.spec.replica_config.num_replicas == 2
    # Defaults are filled in and JSON is stored canonically.
    assert record.spec.replica_config.max_ongoing_requests == 5
    assert record.spec.replica_config.max_queued_requests == -1
    assert record.spec.replica_config.health_check_period_s == 10
    assert record.spec.replica_config.user_config_json == '{"a":[1],"b":1}'
    assert record.start_time.seconds > 0 and not record.deleted

    assert [r.spec.name for r in client.list()] == ["Model"]
    assert client.delete(["Model"]) == ["Model"]
    with pytest.raises(ControllerError) as err:
        client.get("Model")
    assert err.value.code == grpc.StatusCode.NOT_FOUND
    assert "default/Model" in err.value.details
    assert client.list() == []

    history = client.list(include_deleted=True)
    assert len(history) == 1 and history[0].deleted
    assert history[0].start_time.seconds > 0
    assert history[0].end_time.ToNanoseconds() >= history[0].start_time.ToNanoseconds()


def test_deploy_is_idempotent(client: ControllerClient, fleet) -> None:
    first = client.deploy(spec(replica_config=d.ReplicaConfig(user_config_json='{"x": 1}')))
    assert first.updating and first.version
    before = store_revision(fleet.store_url)
    # Same meaning, different JSON spelling and an explicit default: no change.
    again = client.deploy(spec(replica_config=d.ReplicaConfig(
        user_config_json='{ "x" : 1 }', max_ongoing_requests=5)))
    assert not again.updating and again.version == first.version
    assert store_revision(fleet.store_url) == before

    changed = client.deploy(spec(replica_config=d.ReplicaConfig(user_config_json='{"x": 2}')))
    assert changed.updating
    # user_config does not define the code: the derived version stays.
    assert changed.version == first.version
    code_change = client.deploy(spec(init_args_json="[1]"))
    assert code_change.updating and code_change.version != first.version


def test_the_files_of_the_working_dir_are_part_of_the_version(client: ControllerClient,
                                                                  tmp_path) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "model.py").write_text("class Model: pass\n")
    runtime = d.RuntimeOptions(working_dir=str(code), excludes=["data/"],
                               working_dir_digest="sent-by-a-client")
    first = client.deploy(spec(runtime=runtime))
    stored = client.get("Model").spec.runtime.working_dir_digest
    assert first.updating and stored and stored != "sent-by-a-client"
    # Bytecode, excluded data: the same code.
    (code / "__pycache__").mkdir()
    (code / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0")
    (code / "data").mkdir()
    (code / "data" / "weights.bin").write_bytes(b"\1" * 100)
    same = client.deploy(spec(runtime=runtime))
    assert not same.updating and same.version == first.version
    # An edited module: a new version.
    (code / "model.py").write_text("class Model:\n    edited = True\n")
    edited = client.deploy(spec(runtime=runtime))
    assert edited.updating and edited.version != first.version


def test_prev_version_preconditions(client: ControllerClient) -> None:
    with pytest.raises(ControllerError) as err:
        client.deploy(spec(version="v2", prev_version="v1"))
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "does not exist" in err.value.details
    assert client.list() == []

    client.deploy(spec(version="v1"))
    with pytest.raises(ControllerError) as err:
        client.deploy(spec(version="v3", prev_version="v0"))
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "'v0'" in err.value.details and "'v1'" in err.value.details
    assert client.get("Model").version == "v1"

    assert client.deploy(spec(version="v2", prev_version="v1")).updating
    # A retry of that acknowledged deploy changes nothing and succeeds.
    assert not client.deploy(spec(version="v2", prev_version="v1")).updating
    assert client.get("Model").version == "v2"


def test_bad_input_is_invalid_argument_and_writes_nothing(client: ControllerClient,
                                                          fleet) -> None:
    before = store_revision(fleet.store_url)
    cases = {
        "spec.route_prefix": spec(route_prefix="model"),
        "spec.name": spec(name="has/slash"),
        "spec.import_path": spec(import_path="no_colon"),
        "spec.init_args_json": spec(init_args_json='{"not": "a list"}'),
        "spec.replica_config.user_config_json": spec(
            replica_config=d.ReplicaConfig(user_config_json="{broken")),
        "spec.replica_config.max_ongoing_requests": spec(
            replica_config=d.ReplicaConfig(max_ongoing_requests=0)),
        "spec.replica_config.num_replicas": spec(replica_config=d.ReplicaConfig(
            num_replicas=1, autoscaling_config=d.AutoscalingConfig(max_replicas=3))),
        "spec.replica_config.autoscaling_config.min_replicas": spec(
            replica_config=d.ReplicaConfig(autoscaling_config=d.AutoscalingConfig(
                min_replicas=5, max_replicas=2))),
        # Fine on the wire, but canonical JSON would make the record too big for etcd.
        "spec": spec(init_args_json="[" + ",".join(["1e9"] * 60_000) + "]",
                     init_kwargs_json='{"a": [' + ",".join(["1e9"] * 60_000) + "]}"),
    }
    for field, bad in cases.items():
        with pytest.raises(ControllerError) as err:
            client.deploy(bad)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, field
        assert err.value.details.startswith(field + ":"), (field, err.value.details)
    assert store_revision(fleet.store_url) == before
    assert client.list(include_deleted=True) == []


def test_huge_bad_input_is_named_not_echoed_whole(client: ControllerClient, fleet) -> None:
    huge = "n" * 100_000
    cases = [spec(name=huge + "/"),  # a name that breaks the rule, echoed in the message
             spec(replica_config=d.ReplicaConfig(resources=d.Resources(
                 custom={huge + " ": 1})))]  # a field path that carries the input
    for bad in cases:
        with pytest.raises(ControllerError) as err:
            client.deploy(bad)
        assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT, err.value.details[:200]
        assert len(err.value.details) < 2_000 and "more characters" in err.value.details
    assert client.list(include_deleted=True) == []


def test_a_malformed_message_is_invalid_argument(fleet) -> None:
    (proc,) = fleet.start(1)
    fleet.leader()
    with grpc.insecure_channel(proc.address) as channel:
        raw: Any = channel.unary_unary("/servefleet.v1.ControllerService/Deploy",
                                  request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\xff\xff\xff\xff not a protobuf", timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "DeployRequest" in (err.value.details() or "")


def test_delete_unknown_changes_nothing(client: ControllerClient, fleet) -> None:
    client.deploy(spec())
    before = store_revision(fleet.store_url)
    assert client.delete(["Nope"]) == []
    assert client.delete(["Model"], application="other") == []
    assert store_revision(fleet.store_url) == before
    assert [r.spec.name for r in client.list()] == ["Model"]


def test_route_prefix_taken_by_another_deployment(client: ControllerClient) -> None:
    client.deploy(spec("A", route_prefix="/shared"))
    with pytest.raises(ControllerError) as err:
        client.deploy(spec("B", application="other", route_prefix="/shared"))
    assert err.value.code == grpc.StatusCode.ALREADY_EXISTS
    assert "default/A" in err.value.details
    client.delete(["A"])
    assert client.deploy(spec("B", application="other", route_prefix="/shared")).updating


def test_status_groups_deployments_by_application(client: ControllerClient, fleet) -> None:
    client.deploy(spec("A", application="app1"))
    client.deploy(spec("B", application="app1", replica_config=d.ReplicaConfig(num_replicas=0)))
    client.deploy(spec("C", application="app2", replica_config=d.ReplicaConfig(num_replicas=3)))
    status = client.status()
    assert status.leader == fleet.started[0].address
    assert status.cluster == fleet.cluster
    apps = {a.name: a for a in status.applications}
    assert sorted(apps) == ["app1", "app2"]
    deployments = {d.name: d for d in apps["app1"].deployments}
    # Nothing runs replicas yet: a positive target is still updating.
    assert deployments["A"].status == status_pb2.DEPLOYMENT_STATUS_UPDATING
    assert deployments["A"].target_replicas == 1
    assert deployments["B"].status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
    assert apps["app1"].status == status_pb2.APPLICATION_STATUS_DEPLOYING
    assert apps["app2"].deployments[0].target_replicas == 3
    assert list(status.proxies) == []


def test_health_and_reflection(fleet) -> None:
    (proc,) = fleet.start(1)
    fleet.leader()
    with grpc.insecure_channel(proc.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest()).status == 1
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(  # type: ignore[operator]  # untyped in the stubs
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name for r in replies for s in r.list_services_response.service}
    assert {"servefleet.v1.ControllerService", "grpc.health.v1.Health"} <= names


def test_load_reports_by_call_and_by_stream(client: ControllerClient, fleet) -> None:
    client.deploy(spec())
    with grpc.insecure_channel(fleet.leader().address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        stub.ReportLoad(api.ReportLoadRequest(reporter_id="p1", queued={"default/Model": 2}))
        stub.StreamLoad(iter([
            api.StreamLoadRequest(report=api.ReportLoadRequest(
                reporter_id="p2", queued={"default/Model": 9})),
            api.StreamLoadRequest(report=api.ReportLoadRequest(  # replaces the one before
                reporter_id="p2", queued={"default/Model": 3}, ongoing={"default/Model": 4}))]))
        (dep,) = client.status().applications[0].deployments
        assert dep.queued_requests == 5
        with pytest.raises(grpc.RpcError) as err:
            stub.StreamLoad(iter([api.StreamLoadRequest(report=api.ReportLoadRequest(
                reporter_id="p3", queued={"no-slash": 1}))]))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "queued['no-slash']" in (err.value.details() or "")
        with pytest.raises(grpc.RpcError) as err:  # a bad applied set: nothing of it stored
            stub.ReportLoad(api.ReportLoadRequest(
                reporter_id="p1", queued={"default/Model": 7},
                applied=api.AppliedReplicaSets(snapshot_ids={"default/Model": "x" * 65})))
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "applied.snapshot_ids['default/Model']" in (err.value.details() or "")
    assert client.status().applications[0].deployments[0].queued_requests == 5


def test_standby_answers_unavailable_with_the_leader(etcd_fleet) -> None:
    etcd_fleet.start(2)
    leader = etcd_fleet.leader()
    (standby,) = [p for p in etcd_fleet.started if p is not leader]
    with grpc.insecure_channel(standby.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetStatus(api.GetStatusRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        metadata: Any = err.value.trailing_metadata()  # (key, value) pairs
        assert ("servefleet-leader", leader.address) in metadata
        with pytest.raises(grpc.RpcError) as err:  # a client stream is turned away too
            stub.StreamLoad(iter([api.StreamLoadRequest(report=api.ReportLoadRequest(
                reporter_id="p", queued={"default/A": 1}))]), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        metadata = err.value.trailing_metadata()
        assert ("servefleet-leader", leader.address) in metadata
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest()).status == 1
        service = health.Check(health_pb2.HealthCheckRequest(
            service="servefleet.v1.ControllerService"))
        assert service.status == health_pb2.HealthCheckResponse.NOT_SERVING
    # The client, pointed at the standby alone, follows the hint.
    with ControllerClient([standby.address], timeout=10) as client:
        assert client.deploy(spec()).updating
        assert client.status().leader == leader.address


def test_shutdown_deletes_everything_and_exits(fleet) -> None:
    (proc,) = fleet.start(1)
    fleet.leader()
    with ControllerClient(proc.address) as client:
        client.deploy(spec("A"))
        client.deploy(spec("B", application="x"))
        client.shutdown()
    assert proc.proc is not None and proc.proc.wait(15) == 0
    (again,) = fleet.start(1)
    fleet.leader()
    with ControllerClient(again.address) as client:
        assert client.list() == []
        assert {r.spec.name for r in client.list(include_deleted=True)} == {"A", "B"}
