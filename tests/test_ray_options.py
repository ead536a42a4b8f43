"""Ray Serve's deployment options as servefleet reads them (pure): every name
Ray's `serve.deployment` takes, the renamed ones with a DeprecationWarning,
num_replicas="auto", ray_actor_options, and the ones noted as not used."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.option_checks import OptionError
from servefleet._private.configuration.option_notes import Note, default_notes
from servefleet._private.configuration.options import to_override
from servefleet._private.configuration.ray_options import merge_options, normalize_options

# Every keyword of Ray Serve 2.x's @serve.deployment (but the decorated object
# and `name`), with a value a Ray user writes.
RAY_DEPLOYMENT_OPTIONS = {
    "version": "v1",
    "num_replicas": 2,
    "route_prefix": "/shop",
    "ray_actor_options": {"num_cpus": 0.5, "num_gpus": 0, "memory": 1e9,
                          "resources": {"special": 1}, "accelerator_type": "A100",
                          "runtime_env": {"env_vars": {"MODE": "fast"}}},
    "placement_group_bundles": [{"CPU": 1}, {"GPU": 1}],
    "placement_group_strategy": "STRICT_PACK",
    "user_config": {"threshold": 0.5},
    "max_ongoing_requests": 8,
    "max_queued_requests": 20,
    "graceful_shutdown_wait_loop_s": 1,
    "graceful_shutdown_timeout_s": 10,
    "health_check_period_s": 5,
    "health_check_timeout_s": 15,
    "logging_config": {"encoding": "JSON", "log_level": "DEBUG", "logs_dir": "/tmp/x",
                       "enable_access_log": False},
    "request_router_config": {"request_router_class": "my.Router",
                              "request_routing_stats_period_s": 5},
    "max_constructor_retry_count": 3,
}


class Collected(list):
    def __call__(self, note: Note) -> None:
        self.append(note)


def override(options: dict, notes: Collected | None = None):
    return to_override("deployment D", options, "D", notes if notes is not None
                       else Collected())


@pytest.mark.parametrize("key", sorted(RAY_DEPLOYMENT_OPTIONS))
def test_each_option_ray_takes_is_accepted(key: str) -> None:
    notes = Collected()
    options = {key: RAY_DEPLOYMENT_OPTIONS[key]}
    if key == "placement_group_strategy":  # Ray requires the bundles with it
        options["placement_group_bundles"] = [{"CPU": 1}]
    override(options, notes)
    notes[:] = [n for n in notes if n.option == key]
    ignored = {"placement_group_bundles", "placement_group_strategy", "logging_config",
               "max_constructor_retry_count"}
    if key == "request_router_config":  # Ray's router config names servefleet's router
        assert override(options).replica_config.request_router == "my:Router"
    if key in ignored:
        assert [n.option for n in notes] == [key] and not notes[0].deprecated
        assert notes[0].message.startswith(f"deployment D.{key}: not used: ")


def test_all_of_rays_options_at_once_map_to_servefleets() -> None:
    options = {k: v for k, v in RAY_DEPLOYMENT_OPTIONS.items()
               if k != "placement_group_strategy"}  # needs the bundles: kept below
    options["placement_group_strategy"] = "PACK"
    out = override(options)
    config = out.replica_config
    assert (config.num_replicas, config.max_ongoing_requests, config.max_queued_requests) == (
        2, 8, 20)
    assert (config.health_check_period_s, config.health_check_timeout_s) == (5, 15)
    assert (config.graceful_shutdown_wait_loop_s, config.graceful_shutdown_timeout_s) == (1, 10)
    assert config.user_config_json == '{"threshold":0.5}' and out.version == "v1"
    # num_cpus 0.5: one CPU thread, as Ray sets OMP_NUM_THREADS (runtime/threads.py)
    assert dict(out.runtime.env) == {"MODE": "fast", "OMP_NUM_THREADS": "1"}
    # Ray's logical CPUs and memory are not Docker limits here.
    assert not config.HasField("resources")


def test_num_replicas_auto_is_rays_default_autoscaling_under_the_given_fields() -> None:
    auto = override({"num_replicas": "auto"}).replica_config
    assert not auto.HasField("num_replicas")
    assert (auto.autoscaling_config.min_replicas, auto.autoscaling_config.max_replicas,
            auto.autoscaling_config.target_ongoing_requests) == (1, 100, 2)
    given = override({"num_replicas": "auto",
                      "autoscaling_config": {"max_replicas": 5, "upscale_delay_s": 3}})
    scaling = given.replica_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas, scaling.upscale_delay_s) == (1, 5, 3)
    with pytest.raises(OptionError, match="num_replicas: expected an integer, got 'many'"):
        override({"num_replicas": "many"})


def test_renamed_keys_warn_naming_the_new_key_and_map_to_it() -> None:
    with pytest.warns(DeprecationWarning, match="max_concurrent_queries: deprecated, use "
                                                "max_ongoing_requests") as caught:
        out = to_override("deployment D", {"max_concurrent_queries": 3})
    assert out.replica_config.max_ongoing_requests == 3
    # The warning points at the line that passed the option, not into servefleet.
    assert caught[0].filename == __file__
    with pytest.warns(DeprecationWarning) as caught:
        out = to_override("deployment D", {"autoscaling_config": {
            "target_num_ongoing_requests_per_replica": 4, "upscale_smoothing_factor": 2,
            "smoothing_factor": 0.5, "min_replicas": 0, "max_replicas": 3}})
    said = sorted(str(w.message) for w in caught)
    assert said == [
        "deployment D.autoscaling_config.smoothing_factor: deprecated, use upscaling_factor "
        "and downscaling_factor",
        "deployment D.autoscaling_config.target_num_ongoing_requests_per_replica: "
        "deprecated, use target_ongoing_requests",
        "deployment D.autoscaling_config.upscale_smoothing_factor: deprecated, use "
        "upscaling_factor"]
    scaling = out.replica_config.autoscaling_config
    # Ray's order: the direction's own smoothing factor before the general one.
    assert (scaling.target_ongoing_requests, scaling.upscaling_factor,
            scaling.downscaling_factor) == (4, 2, 0.5)


def test_an_option_under_both_names_is_an_error() -> None:
    with pytest.raises(OptionError, match="max_concurrent_queries: give max_ongoing_requests "
                                          "only"):
        override({"max_concurrent_queries": 3, "max_ongoing_requests": 4})
    with pytest.raises(OptionError, match="target_num_ongoing_requests_per_replica: give "
                                          "target_ongoing_requests only"):
        override({"autoscaling_config": {"target_num_ongoing_requests_per_replica": 1,
                                         "target_ongoing_requests": 2}})


def policy(context) -> int:
    return 1


@pytest.mark.parametrize(("given", "expected"), [
    ("my_policies:by_queue", "my_policies:by_queue"),
    ("my_policies.by_queue", "my_policies:by_queue"),  # Ray's dotted form
    ({"name": "pkg.policies.by_queue"}, "pkg.policies:by_queue"),  # Ray's AutoscalingPolicy
    (policy, f"{__name__}:policy"),
    ("ray.serve.autoscaling_policy:default_autoscaling_policy", ""),  # the built-in one
])
def test_autoscaling_policy_in_each_of_rays_forms(given, expected: str) -> None:
    out = override({"autoscaling_config": {"policy": given}})
    assert out.replica_config.autoscaling_config.policy == expected


def test_ray_actor_options_runtime_env_and_gpus_are_mapped() -> None:
    out = override({"ray_actor_options": {"num_gpus": 1, "runtime_env": {
        "working_dir": "/srv/code", "env_vars": {"A": "1"}, "excludes": ["data/"],
        "image_uri": "registry:5000/team/model:v2"}}})
    assert out.replica_config.resources.num_gpus == 1
    assert (out.runtime.working_dir, dict(out.runtime.env), list(out.runtime.excludes),
            out.runtime.image) == ("/srv/code", {"A": "1"}, ["data/"],
                                   "registry:5000/team/model:v2")


@pytest.mark.parametrize(("options", "message"), [
    ({"ray_actor_options": {"num_cpus": 1, "max_restarts": 3}},
     "ray_actor_options.max_restarts: unknown key \\(expected one of accelerator_type, "),
    ({"ray_actor_options": {"num_gpus": -1}}, "ray_actor_options.num_gpus: must be a number "
                                              ">= 0"),
    ({"ray_actor_options": {"runtime_env": {"pip": ["torch"]}}},
     "ray_actor_options.runtime_env.pip: not supported: servefleet installs no packages"),
    ({"ray_actor_options": {"runtime_env": {"conda": "env.yaml"}}},
     "runtime_env.conda: not supported: servefleet creates no conda environments"),
    ({"ray_actor_options": {"runtime_env": {"working_dir": "s3://bucket/code.zip"}}},
     "runtime_env.working_dir: a remote URI .* servefleet downloads no code"),
    ({"ray_actor_options": {"runtime_env": {"env_vars": {"N": 1}}}},
     "runtime_env.env_vars.N: expected a string, got 1"),
    ({"ray_actor_options": {"runtime_env": {"plugins": {}}}},
     "runtime_env.plugins: unknown runtime_env key"),
    ({"runtime": {"env": {"A": "1"}}, "ray_actor_options": {"runtime_env": {}}},
     "give runtime or ray_actor_options.runtime_env, not both"),
    ({"placement_group_strategy": "PACK"}, "placement_group_strategy: needs "
                                           "placement_group_bundles"),
    ({"placement_group_bundles": [{"CPU": 1}], "placement_group_strategy": "TIGHT"},
     "placement_group_strategy: must be one of PACK, SPREAD, STRICT_PACK, STRICT_SPREAD"),
    ({"placement_group_bundles": [{"CPU": 1}], "max_replicas_per_node": 2},
     "cannot be set together with max_replicas_per_node"),
    ({"max_replicas_per_node": 0}, "max_replicas_per_node: must be between 1 and 100"),
    ({"logging_config": {"level": "DEBUG"}}, "logging_config.level: unknown key"),
    ({"route_prefix": "shop"}, "route_prefix: must start with \"/\""),
    ({"route_prefix": "/shop/"}, "route_prefix: must start with \"/\", not end with one"),
    ({"autoscaling_config": {"policy": {"name": "p:f", "kwargs": {}}}},
     "autoscaling_config.policy.kwargs: unknown key"),
    ({"autoscaling_config": {"prometheus_metrics": "qps"}},
     "autoscaling_config.prometheus_metrics: expected a list of metric names"),
    ({"max_ongoing": 3}, "deployment D.max_ongoing: unknown key \\(expected one of "),
])
def test_bad_ray_options_are_errors_naming_the_path(options: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        to_override("deployment D", options, "D", Collected())


def test_options_not_used_are_noted_and_the_default_logs_each_once(caplog) -> None:
    notes = Collected()
    override({"ray_actor_options": {"num_cpus": 0.2, "memory": 100}}, notes)
    # num_cpus is used (the replica's CPU threads); memory is not.
    assert [(n.option, n.deprecated) for n in notes] == [("ray_actor_options.memory", False)]
    assert "logical amount" in notes[0].message
    note = Note("test-only option", "deployment D.x: not used: a test", False)
    with caplog.at_level(logging.WARNING, logger="servefleet._private.configuration.options"):
        default_notes(note)
        default_notes(note._replace(message="deployment E.x: not used: a test"))
    assert [r.getMessage() for r in caplog.records] == ["deployment D.x: not used: a test"]


@dataclasses.dataclass
class DataclassConfig:
    min_replicas: int = 1
    max_replicas: int | None = None


class PydanticLike:
    """What pydantic models (Ray's config classes) offer: model_dump(exclude_unset)."""

    def model_dump(self, exclude_unset: bool = False) -> dict:
        return {"max_replicas": 7} if exclude_unset else {"max_replicas": 7, "min_replicas": 1}


def test_config_objects_count_as_the_fields_they_were_given() -> None:
    assert normalize_options("d", {"autoscaling_config": PydanticLike()}) == {
        "autoscaling_config": {"max_replicas": 7}}
    assert normalize_options("d", {"autoscaling_config": DataclassConfig(min_replicas=0)}) == {
        "autoscaling_config": {"min_replicas": 0}}
    with pytest.raises(OptionError, match=r"d\.autoscaling_config: expected a mapping, got "
                                          r"object"):
        normalize_options("d", {"autoscaling_config": object()})


def test_normalized_options_are_servefleets_and_normalize_again_unchanged() -> None:
    with pytest.warns(DeprecationWarning):
        once = normalize_options("d", {"max_concurrent_queries": 2, "num_replicas": "auto",
                                       "route_prefix": "/x",
                                       "ray_actor_options": {"num_cpus": 1}})
    assert once == {"max_ongoing_requests": 2, "route_prefix": "/x", "autoscaling_config": {
        "min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2.0},
        "runtime": {"env": {"OMP_NUM_THREADS": "1"}}}
    with pytest.warns(DeprecationWarning, match="route_prefix: deprecated on a deployment"):
        assert normalize_options("d", once) == once


def test_merge_lays_new_options_over_old_as_rays_options_does() -> None:
    assert merge_options({"num_replicas": 2, "max_concurrent_queries": 3},
                         {"autoscaling_config": {"max_replicas": 4},
                          "max_ongoing_requests": 5}) == {
        "autoscaling_config": {"max_replicas": 4}, "max_ongoing_requests": 5}
    assert merge_options({"autoscaling_config": {"max_replicas": 4}, "user_config": 1},
                         {"num_replicas": 3}) == {"user_config": 1, "num_replicas": 3}
    assert merge_options({"num_replicas": "auto"}, {"autoscaling_config": {"max_replicas": 4}}
                         ) == {"num_replicas": "auto", "autoscaling_config": {"max_replicas": 4}}


@pytest.mark.parametrize(("path", "expected"), [
    ("user_pb2_grpc.add_UserServicer_to_server", "user_pb2_grpc:add_UserServicer_to_server"),
    ("pkg.mod.app", "pkg.mod:app"),
    ("pkg.mod:app", "pkg.mod:app"),
    ("app", "app"),  # left for the format check to refuse by name
    ("mod.", "mod."),
])
def test_dotted_import_paths_get_their_colon(path: str, expected: str) -> None:
    assert colon_form(path) == expected


def test_an_error_in_request_router_config_names_its_path_once() -> None:
    """Found by review: the path read `...request_router_config.request_router_config.x`."""
    with pytest.raises(OptionError) as bad:
        normalize_options("deployments[0]", {"request_router_config": {"colour": 1}})
    assert str(bad.value).startswith("deployments[0].request_router_config")
    assert "request_router_config.request_router_config" not in str(bad.value)
