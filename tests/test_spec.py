"""Unit tests of spec validation and normalisation (pure code, no servers)."""

from __future__ import annotations

import pytest

from servefleet.controller.errors import InvalidArgument
from servefleet.controller.goals.spec import (
    MAX_JSON_BYTES,
    code_hash,
    normalize_spec,
    stored_version,
)
from servefleet.v1 import deployment_pb2 as d


def spec(**fields) -> d.DeploymentSpec:
    fields.setdefault("name", "Model")
    fields.setdefault("import_path", "pkg.mod:Model")
    return d.DeploymentSpec(**fields)


def refused(bad: d.DeploymentSpec) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as err:
        normalize_spec(bad)
    return err.value


def test_defaults_are_filled_and_input_untouched() -> None:
    raw = spec()
    out = normalize_spec(raw)
    config = out.replica_config
    assert out.application == "default"
    assert (config.num_replicas, config.max_ongoing_requests, config.max_queued_requests) == (
        1, 5, -1)
    assert (config.graceful_shutdown_timeout_s, config.graceful_shutdown_wait_loop_s) == (20, 2)
    assert (config.health_check_period_s, config.health_check_timeout_s) == (10, 30)
    assert config.startup_timeout_s == 300
    assert not raw.replica_config.HasField("num_replicas")


def test_zero_replicas_is_a_value_not_unset() -> None:
    out = normalize_spec(spec(replica_config=d.ReplicaConfig(num_replicas=0)))
    assert out.replica_config.HasField("num_replicas") and out.replica_config.num_replicas == 0


def test_autoscaling_defaults_and_bounds() -> None:
    out = normalize_spec(spec(replica_config=d.ReplicaConfig(
        autoscaling_config=d.AutoscalingConfig(min_replicas=2, max_replicas=8))))
    auto = out.replica_config.autoscaling_config
    assert auto.initial_replicas == 2 and auto.target_ongoing_requests == 2
    assert not out.replica_config.HasField("num_replicas")
    err = refused(spec(replica_config=d.ReplicaConfig(autoscaling_config=d.AutoscalingConfig(
        min_replicas=1, max_replicas=4, initial_replicas=9))))
    assert err.field == "spec.replica_config.autoscaling_config.initial_replicas"
    assert auto.downscale_to_zero_delay_s == auto.downscale_delay_s == 600
    assert auto.aggregation_function == "mean" and auto.policy == ""


@pytest.mark.parametrize(("fields", "field", "words"), [
    ({"aggregation_function": "median"}, "aggregation_function", "mean, max, min"),
    ({"policy": "not a path"}, "policy", "'module:function'"),
    ({"downscale_to_zero_delay_s": -1}, "downscale_to_zero_delay_s", ""),
])
def test_bad_autoscaling_options_name_their_field(fields: dict, field: str, words: str) -> None:
    err = refused(spec(replica_config=d.ReplicaConfig(
        autoscaling_config=d.AutoscalingConfig(**fields))))
    assert err.field == f"spec.replica_config.autoscaling_config.{field}"
    assert words in err.rule


def test_autoscaling_aggregation_is_case_blind_and_policy_kept() -> None:
    out = normalize_spec(spec(replica_config=d.ReplicaConfig(autoscaling_config=(
        d.AutoscalingConfig(aggregation_function="MAX", policy="pol.icy:decide")))))
    auto = out.replica_config.autoscaling_config
    assert (auto.aggregation_function, auto.policy) == ("max", "pol.icy:decide")


def test_json_fields_are_canonical_and_checked() -> None:
    out = normalize_spec(spec(init_kwargs_json='{"b": 2, "a": 1}',
                              replica_config=d.ReplicaConfig(user_config_json=' [1, 2] ')))
    assert out.init_kwargs_json == '{"a":1,"b":2}'
    assert out.replica_config.user_config_json == "[1,2]"
    assert refused(spec(init_args_json="NaN")).field == "spec.init_args_json"
    assert refused(spec(init_args_json='{"a": 1}')).rule == "must be a JSON array"
    assert refused(spec(init_kwargs_json="[1]")).rule == "must be a JSON object"
    big = '"' + "x" * MAX_JSON_BYTES + '"'
    err = refused(spec(replica_config=d.ReplicaConfig(user_config_json=big)))
    assert err.field == "spec.replica_config.user_config_json" and "bytes" in err.rule


@pytest.mark.parametrize("name", ["Model", "m", "a-b_c", "A1", "x" * 63])
def test_good_names(name: str) -> None:
    assert normalize_spec(spec(name=name)).name == name


@pytest.mark.parametrize("name", ["", "-a", "a-", "a b", "a/b", "x" * 64, "é", "adv\n"])
def test_bad_names(name: str) -> None:
    err = refused(spec(name=name))
    assert err.field == "spec.name" and repr(name) in err.rule


@pytest.mark.parametrize("prefix", ["/", "/a", "/a/b-c", "/v1.2/~x"])
def test_good_route_prefixes(prefix: str) -> None:
    assert normalize_spec(spec(route_prefix=prefix)).route_prefix == prefix


@pytest.mark.parametrize("prefix", ["", "a", "/a/", "//a", "/a b", "/a?x=1", "/a#f", "/{x}",
                                    "/a\n"])
def test_bad_route_prefixes(prefix: str) -> None:
    err = refused(spec(route_prefix=prefix))
    assert err.field == "spec.route_prefix" and "must start with '/'" in err.rule


@pytest.mark.parametrize("path", ["", "mod", "mod:", ":attr", "a.:b", "1mod:x", "m:a b",
                                  "m:C\n"])
def test_bad_import_paths(path: str) -> None:
    assert refused(spec(import_path=path)).field == "spec.import_path"


@pytest.mark.parametrize(("field", "config"), [
    ("max_ongoing_requests", d.ReplicaConfig(max_ongoing_requests=0)),
    ("max_queued_requests", d.ReplicaConfig(max_queued_requests=-2)),
    ("num_replicas", d.ReplicaConfig(num_replicas=10_001)),
    ("health_check_period_s", d.ReplicaConfig(health_check_period_s=float("nan"))),
    ("health_check_timeout_s", d.ReplicaConfig(health_check_timeout_s=0)),
    ("startup_timeout_s", d.ReplicaConfig(startup_timeout_s=-5)),
    ("graceful_shutdown_timeout_s", d.ReplicaConfig(graceful_shutdown_timeout_s=-1)),
    ("graceful_shutdown_wait_loop_s", d.ReplicaConfig(graceful_shutdown_wait_loop_s=float("inf"))),
    ("resources.num_cpus", d.ReplicaConfig(resources=d.Resources(num_cpus=-1))),
    ("resources.custom['bad key']", d.ReplicaConfig(resources=d.Resources(custom={"bad key": 1}))),
    ("retry_methods[0]", d.ReplicaConfig(retry_methods=["get"])),
    ("retry_methods[1]", d.ReplicaConfig(retry_methods=["POST", "POST"])),
])
def test_bad_numbers_name_their_field(field: str, config: d.ReplicaConfig) -> None:
    assert refused(spec(replica_config=config)).field == f"spec.replica_config.{field}"


def test_runtime_options_checked() -> None:
    assert refused(spec(runtime=d.RuntimeOptions(working_dir="rel/dir"))).field == (
        "spec.runtime.working_dir")
    assert refused(spec(runtime=d.RuntimeOptions(env={"1X": "v"}))).field == (
        "spec.runtime.env['1X']")


def test_versions_checked_and_prev_version_not_stored() -> None:
    assert refused(spec(version="has space")).field == "spec.version"
    assert refused(spec(prev_version="x" * 129)).field == "spec.prev_version"
    assert normalize_spec(spec(version="v1", prev_version="v0")).prev_version == ""


def test_derived_version_follows_code_not_config() -> None:
    base = normalize_spec(spec(runtime=d.RuntimeOptions(env={"A": "1", "B": "2"})))
    reordered = normalize_spec(spec(runtime=d.RuntimeOptions(env={"B": "2", "A": "1"})))
    tuned = normalize_spec(spec(runtime=d.RuntimeOptions(env={"A": "1", "B": "2"}),
                                replica_config=d.ReplicaConfig(user_config_json='{"t": 1}')))
    assert code_hash(base) == code_hash(reordered) == code_hash(tuned)
    assert code_hash(normalize_spec(spec(init_args_json="[1]"))) != code_hash(base)
    assert stored_version(base) == code_hash(base)
    assert stored_version(normalize_spec(spec(version="v9"))) == "v9"


@pytest.mark.parametrize("text", ['"\\ud800"', "1e400", "[-1e999]", '{"a": NaN}'])
def test_json_that_cannot_be_stored_as_json_is_refused(text: str) -> None:
    err = refused(spec(replica_config=d.ReplicaConfig(user_config_json=text)))
    assert err.field == "spec.replica_config.user_config_json"


def test_versions_with_a_trailing_newline_are_refused() -> None:
    assert refused(spec(version="v1\n")).field == "spec.version"


def test_grpc_fields_are_checked_and_the_servicers_are_code() -> None:
    servicer = "pkg.svc_pb2_grpc:add_SvcServicer_to_server"
    good = normalize_spec(spec(grpc_servicer_functions=[servicer],
                               grpc_services=["pkg.Svc"],
                               grpc_streaming_methods=["/pkg.Svc/Stream", "/pkg.Svc/Up"],
                               grpc_client_streaming_methods=["/pkg.Svc/Up"]))
    assert list(good.grpc_servicer_functions) == [servicer]
    # New servicers are new code (new replicas); a spec without any keeps its hash.
    assert code_hash(good) != code_hash(spec()) == code_hash(normalize_spec(spec()))
    cases = [
        (spec(grpc_servicer_functions=["not a path"]), "spec.grpc_servicer_functions[0]"),
        (spec(grpc_servicer_functions=[servicer, servicer]),
         "spec.grpc_servicer_functions[1]"),
        (spec(grpc_servicer_functions=[f"m{i}:f" for i in range(33)]),
         "spec.grpc_servicer_functions"),
        (spec(grpc_services=["pkg..Svc"]), "spec.grpc_services[0]"),
        (spec(grpc_streaming_methods=["pkg.Svc/Stream"]), "spec.grpc_streaming_methods[0]"),
        (spec(grpc_streaming_methods=["/pkg.Svc/Up"], grpc_client_streaming_methods=["/p/"]),
         "spec.grpc_client_streaming_methods[0]"),
        # A client-streaming RPC streams: one not listed as streaming is refused.
        (spec(grpc_client_streaming_methods=["/pkg.Svc/Up"]),
         "spec.grpc_client_streaming_methods[0]"),
    ]
    for bad, field in cases:
        assert refused(bad).field == field


def test_placement_is_checked_and_moves_replicas() -> None:
    placed = spec(runtime=d.RuntimeOptions(placement=d.Placement(
        constraints=["node.labels.gpu == true", "node.role!=manager"],
        spread=["node.labels.zone"])))
    assert code_hash(normalize_spec(placed)) != code_hash(normalize_spec(spec()))
    for runtime, field in [
        (d.RuntimeOptions(placement=d.Placement(constraints=["gpu"])),
         "spec.runtime.placement.constraints[0]"),
        (d.RuntimeOptions(placement=d.Placement(spread=["node.labels.zone == a"])),
         "spec.runtime.placement.spread[0]"),
        (d.RuntimeOptions(placement=d.Placement(spread=["node.id"] * 9)),
         "spec.runtime.placement.spread"),
    ]:
        assert refused(spec(runtime=runtime)).field == field


def test_rays_dotted_servicer_functions_are_stored_in_colon_form() -> None:
    out = normalize_spec(spec(grpc_servicer_functions=[
        "pkg.model_pb2_grpc.add_ModelServicer_to_server",
        "other_pb2_grpc:add_OServicer_to_server"]))
    assert list(out.grpc_servicer_functions) == [
        "pkg.model_pb2_grpc:add_ModelServicer_to_server",
        "other_pb2_grpc:add_OServicer_to_server"]
    with pytest.raises(InvalidArgument, match=r"grpc_servicer_functions\[0\]"):
        normalize_spec(spec(grpc_servicer_functions=["nodots"]))
