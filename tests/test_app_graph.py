"""The Python API's graph, option checking, and application specs (pure code)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from servefleet import deployment
from servefleet._private.applications.api import HANDLE_MARKER, graph_of
from servefleet._private.applications.build import build
from servefleet._private.configuration.options import OptionError
from servefleet.controller.errors import InvalidArgument
from servefleet.controller.goals.app_specs import deployment_specs, normalize_application
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb

APPS = str(Path(__file__).parent / "apps")
sys.path.insert(0, APPS)


@deployment(num_replicas=2, version="code-v")
class Leaf:
    def __init__(self, n: int) -> None:
        self.n = n


@deployment
class Root:
    def __init__(self, *leaves, extra=None) -> None:
        self.leaves = leaves


def test_bound_deployments_become_handle_markers_and_get_unique_names() -> None:
    shared = Leaf.bind(0)
    graph = graph_of(Root.bind(shared, shared, Leaf.bind(1), extra={"x": [Leaf.bind(2)]}))
    names = [d["name"] for d in graph["deployments"]]
    assert graph["ingress"] == "Root" and names == ["Root", "Leaf", "Leaf_1", "Leaf_2"]
    root = graph["deployments"][0]
    assert root["init_args"] == [{HANDLE_MARKER: {"deployment": "Leaf"}},
                                 {HANDLE_MARKER: {"deployment": "Leaf"}},
                                 {HANDLE_MARKER: {"deployment": "Leaf_1"}}]
    assert root["init_kwargs"] == {"extra": {"x": [{HANDLE_MARKER: {"deployment": "Leaf_2"}}]}}
    assert graph["deployments"][1]["import_path"].endswith(":Leaf")
    assert graph["deployments"][1]["options"] == {"num_replicas": 2, "version": "code-v"}


def test_options_are_checked_in_code() -> None:
    with pytest.raises(OptionError, match=r"deployment Leaf\.num_replica: unknown key"):
        Leaf.options(num_replica=3)
    with pytest.raises(OptionError, match=r"max_ongoing_requests: expected an integer, got 'x'"):
        deployment(max_ongoing_requests="x")(lambda request: "")
    with pytest.raises(OptionError, match=r"num_replicas: must be between 0 and 10000, got -1"):
        deployment(num_replicas=-1)(lambda request: "")
    with pytest.raises(OptionError, match=r"min_replicas: must be between 0 and 10000"):
        Leaf.options(autoscaling_config={"min_replicas": 2**40})
    with pytest.raises(OptionError, match=r"autoscaling_config\.policy: expected a string"):
        Leaf.options(autoscaling_config={"policy": 3})
    with pytest.raises(OptionError, match=r"retry_methods: expected a list of HTTP methods"):
        Leaf.options(retry_methods="POST")
    with pytest.raises(OptionError, match=r"retry_methods\[1\]: expected a string, got 3"):
        Leaf.options(retry_methods=["POST", 3])
    with pytest.raises(OptionError, match="cannot travel as JSON"):
        graph_of(Root.bind(object()))
    with pytest.raises(TypeError, match="cannot be called directly"):
        Leaf(1)
    assert Leaf.options(name="Other", num_replicas=5).bind(1).deployment.name == "Other"


def test_the_build_step_resolves_apps_deployments_and_builders() -> None:
    assert build("graph_app:app", APPS, {})["graph"]["ingress"] == "Front"
    assert build("graph_app:hello", APPS, {})["graph"]["deployments"][0]["name"] == "hello"
    built = build("graph_app:builder", APPS, {"increment": 5, "label": "L"})["graph"]
    assert built["deployments"][0]["init_kwargs"] == {"label": "L"}
    assert built["deployments"][1]["init_args"] == [5]
    failed = build("graph_app:app", APPS, {"unexpected": 1})
    assert not failed["ok"] and "args are given" in failed["error"]
    assert "ModuleNotFoundError" in build("no_such_module:app", APPS, {})["error"]
    assert "expected a bound application" in build("graph_app:not_an_app", APPS, {})["error"]


def app_spec(**fields) -> apb.ApplicationSpec:
    fields.setdefault("name", "calc")
    fields.setdefault("import_path", "graph_app:app")
    return apb.ApplicationSpec(**fields)


def test_file_overrides_win_over_code_which_wins_over_defaults() -> None:
    graph = build("graph_app:app", APPS, {})["graph"]
    spec = normalize_application(app_spec(
        route_prefix="/calc", runtime=dpb.RuntimeOptions(working_dir=APPS, env={"A": "app"}),
        deployments=[apb.DeploymentOverride(
            name="Adder", version="file-v",
            replica_config=dpb.ReplicaConfig(num_replicas=4, user_config_json='{"scale": 3}'),
            runtime=dpb.RuntimeOptions(env={"A": "adder", "B": "b"}))]), "app")
    front, adder = deployment_specs(spec, graph)
    assert (front.name, front.route_prefix, front.application) == ("Front", "/calc", "calc")
    assert front.replica_config.max_ongoing_requests == 20  # code
    assert front.replica_config.num_replicas == 1  # default
    assert not adder.HasField("route_prefix")
    assert adder.replica_config.num_replicas == 4 and adder.version == "file-v"  # file
    assert adder.replica_config.user_config_json == '{"scale":3}'
    assert dict(adder.runtime.env) == {"A": "adder", "B": "b"}
    assert adder.runtime.working_dir == APPS and dict(front.runtime.env) == {"A": "app"}


def test_a_list_set_in_a_later_layer_replaces_the_earlier_one() -> None:
    graph = build("graph_app:app", APPS, {})["graph"]
    adder = next(d for d in graph["deployments"] if d["name"] == "Adder")
    adder["options"] = {"retry_methods": ["post"],
                        "runtime": {"placement": {"constraints": ["node.labels.a == 1"]},
                                    "excludes": ["*.bin"], "env": {"A": "code"}}}
    spec = normalize_application(app_spec(
        runtime=dpb.RuntimeOptions(working_dir=APPS, excludes=["*.tmp"], env={"B": "app"}),
        deployments=[apb.DeploymentOverride(
            name="Adder", replica_config=dpb.ReplicaConfig(retry_methods=["POST", "PUT"]),
            runtime=dpb.RuntimeOptions(placement=dpb.Placement(
                constraints=["node.labels.b == 2"])))]), "app")
    front, out = deployment_specs(spec, graph)
    assert list(out.replica_config.retry_methods) == ["POST", "PUT"]  # not POST, POST, PUT
    assert list(out.runtime.placement.constraints) == ["node.labels.b == 2"]
    assert list(out.runtime.excludes) == ["*.bin"] and list(front.runtime.excludes) == ["*.tmp"]
    assert dict(out.runtime.env) == {"A": "code", "B": "app"}  # maps merge
    assert not front.replica_config.retry_methods


@pytest.mark.parametrize(("spec", "field"), [
    (app_spec(name="bad name"), "app.name"),
    (app_spec(import_path="graph_app"), "app.import_path"),
    (app_spec(route_prefix="no-slash"), "app.route_prefix"),
    (app_spec(deployments=[apb.DeploymentOverride(
        name="Adder", replica_config=dpb.ReplicaConfig(retry_methods=["GET", "BREW"]))]),
     "app.deployments[0].replica_config.retry_methods[1]"),
    (app_spec(args_json="[1]"), "app.args_json"),
    (app_spec(runtime=dpb.RuntimeOptions(working_dir="relative")), "app.runtime.working_dir"),
    (app_spec(deployments=[apb.DeploymentOverride(name="A"), apb.DeploymentOverride(name="A")]),
     "app.deployments[1].name"),
    (app_spec(traffic=apb.TrafficPolicy(split=[apb.WeightedDeployment(deployment="A",
                                                                      weight=-1)])),
     "app.traffic.split[0].weight"),
    (app_spec(traffic=apb.TrafficPolicy(shadow=apb.ShadowTarget(deployment="A",
                                                                fraction=1.5))),
     "app.traffic.shadow.fraction"),
])
def test_bad_application_specs_name_the_field(spec, field) -> None:
    with pytest.raises(InvalidArgument) as e:
        normalize_application(spec, "app")
    assert e.value.field == field


def test_overrides_and_traffic_must_name_deployments_of_the_graph() -> None:
    graph = build("graph_app:app", APPS, {})["graph"]
    with pytest.raises(InvalidArgument, match="overrides deployment 'Missing'"):
        deployment_specs(app_spec(deployments=[apb.DeploymentOverride(name="Missing")]), graph)
    with pytest.raises(InvalidArgument, match="has no deployment 'Canary'"):
        deployment_specs(app_spec(traffic=apb.TrafficPolicy(split=[
            apb.WeightedDeployment(deployment="Canary", weight=1)])), graph)
    with pytest.raises(InvalidArgument, match=r"deployments\[Adder\].replica_config.num_replicas"):
        deployment_specs(app_spec(deployments=[apb.DeploymentOverride(
            name="Adder", replica_config=dpb.ReplicaConfig(num_replicas=10**6))]), graph)


def test_unbound_deployments_as_arguments_stay_distinct() -> None:
    first, second = Leaf.options(name="First"), Leaf.options(name="Second")
    graph = graph_of(Root.bind(first, second, Leaf))
    assert [d["name"] for d in graph["deployments"]] == ["Root", "First", "Second", "Leaf"]


def test_a_file_autoscaling_config_replaces_the_code_num_replicas() -> None:
    graph = build("graph_app:app", APPS, {})["graph"]  # Adder has num_replicas=2 in code
    spec = app_spec(deployments=[apb.DeploymentOverride(
        name="Adder", replica_config=dpb.ReplicaConfig(
            autoscaling_config=dpb.AutoscalingConfig(min_replicas=1, max_replicas=3)))])
    adder = deployment_specs(normalize_application(spec, "app"), graph)[1]
    assert not adder.replica_config.HasField("num_replicas")
    assert adder.replica_config.autoscaling_config.max_replicas == 3


def test_the_build_names_the_grpc_services_and_refuses_what_is_not_a_servicer() -> None:
    examples = str(Path(__file__).parent.parent / "examples")
    servicer = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"
    graph = build("grpc_classifier.app:app", examples, {}, [servicer])["graph"]
    assert graph["grpc_services"] == ["classifier.v1.Classifier"]
    assert graph["grpc_streaming_methods"] == ["/classifier.v1.Classifier/PredictStream"]
    assert graph["grpc_client_streaming_methods"] == []
    # Every shape: requests streaming (client streaming, bidirectional) or not.
    streams = build("streams_app:build", APPS, {}, [
        "grpc_streams.streams_pb2_grpc:add_StreamsServicer_to_server"])["graph"]
    every = ["/streams.v1.Streams/" + m for m in ("Upload", "Echo", "UploadSync", "EchoSync")]
    assert streams["grpc_streaming_methods"] == streams["grpc_client_streaming_methods"] == every
    wrong = build("grpc_classifier.app:app", examples, {},
                  ["grpc_classifier.classifier_pb2_grpc:ClassifierStub"])
    assert not wrong["ok"] and "is not a generated add_XServicer_to_server function" in \
        wrong["error"]
    missing = build("grpc_classifier.app:app", examples, {},
                    ["grpc_classifier.classifier_pb2_grpc:add_Nope_to_server"])
    assert not missing["ok"] and "has no attribute 'add_Nope_to_server'" in missing["error"]


def test_the_build_reports_batch_sizes_and_the_controller_warns(caplog) -> None:
    from servefleet.controller.reconcile.builds import _warn_about_batches
    from servefleet.v1 import deployment_pb2 as dpb

    graph = build("batch_app:Batcher", APPS, {})["graph"]
    assert graph["deployments"][0]["batch_sizes"] == {"predict": 8}
    low = dpb.DeploymentSpec(name="Batcher",
                             replica_config=dpb.ReplicaConfig(max_ongoing_requests=4))
    with caplog.at_level("WARNING"):
        _warn_about_batches("b", [low], graph)
    assert "Batcher.predict has @batch(max_batch_size=8) but max_ongoing_requests is 4" \
        in caplog.text
    caplog.clear()
    low.replica_config.max_ongoing_requests = 16
    _warn_about_batches("b", [low], graph)
    assert caplog.text == ""
