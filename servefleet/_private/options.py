"""Per-deployment options as users write them, and their protobuf form.

The same option names are accepted by `@deployment(...)` and `.options(...)`
in code, by the `deployments[]` entries of a config file, and (as JSON, from
the build step) by the controller. `to_override` first translates Ray Serve's
names (servefleet/_private/ray_options.py: its deprecated keys, num_replicas="auto",
ray_actor_options, the options about Ray's scheduler), then checks names and
types and returns a `DeploymentOverride` whose unset fields mean "not given",
so that overrides can be layered with protobuf's MergeFrom: later layers win
field by field (config file > code > defaults).

Errors are `OptionError` naming the path of the bad value, e.g.
`applications[0].deployments[1].num_replicas: expected an integer, got 'two'`.
Integer options are checked against their bounds here too (a value outside
them would otherwise fail inside protobuf with a message naming nothing);
the controller's validation of the full spec (controller/goals/spec.py)
checks the same bounds and everything else.
"""

from __future__ import annotations

from typing import Any

from servefleet.v1 import application_pb2, deployment_pb2

from .option_checks import (
    OptionError,
    check_bool,
    check_float,
    check_int,
    check_keys,
    check_mapping,
    check_non_negative,
    check_str,
    to_json,
    type_name,
)
from .option_notes import Notes
from .ray_options import SERVEFLEET_OPTIONS, normalize_options

# The checks are re-exported: config files and the controller import them here.
__all__ = ["DEPLOYMENT_OPTIONS", "OptionError", "check_bool", "check_float", "check_int",
           "check_keys", "check_mapping", "check_str", "to_json", "to_override",
           "to_runtime"]

# Bounds of the integer options, shared with the controller's validation.
MAX_REPLICAS = 10_000
MAX_ONGOING = 100_000
MAX_QUEUED = 1_000_000
INT_BOUNDS: dict[str, tuple[int, int]] = {
    "num_replicas": (0, MAX_REPLICAS),
    "max_ongoing_requests": (1, MAX_ONGOING),
    "max_queued_requests": (-1, MAX_QUEUED),  # -1: no limit
    "min_replicas": (0, MAX_REPLICAS),
    "max_replicas": (1, MAX_REPLICAS),
    "initial_replicas": (0, MAX_REPLICAS),
}

INT_OPTIONS = ("num_replicas", "max_ongoing_requests", "max_queued_requests")
FLOAT_OPTIONS = ("health_check_period_s", "health_check_timeout_s",
                 "graceful_shutdown_timeout_s", "graceful_shutdown_wait_loop_s",
                 "startup_timeout_s")
AUTOSCALING_INT = ("min_replicas", "max_replicas", "initial_replicas")
AUTOSCALING_FLOAT = ("target_ongoing_requests", "upscale_delay_s", "downscale_delay_s",
                     "metrics_interval_s", "look_back_period_s", "upscaling_factor",
                     "downscaling_factor", "downscale_to_zero_delay_s")
AUTOSCALING_STR = ("aggregation_function", "policy")
RUNTIME_OPTIONS = ("working_dir", "env", "image", "excludes", "placement")
PLACEMENT_KEYS = ("constraints", "spread")
# What one replica needs from its host: limits for Docker and Swarm replicas
# (controller/runtime/docker.py, swarm.py); the process runtime sets none.
RESOURCE_OPTIONS = ("num_cpus", "num_gpus", "memory_bytes")
DEPLOYMENT_OPTIONS = SERVEFLEET_OPTIONS  # INT_OPTIONS, FLOAT_OPTIONS and the rest below


def to_runtime(path: str, value: Any) -> deployment_pb2.RuntimeOptions:
    value = check_mapping(path, value)
    check_keys(path, value, RUNTIME_OPTIONS)
    out = deployment_pb2.RuntimeOptions()
    if "working_dir" in value:
        out.working_dir = check_str(f"{path}.working_dir", value["working_dir"])
    if "image" in value:
        out.image = check_str(f"{path}.image", value["image"])
    if "env" in value:
        for name, env_value in check_mapping(f"{path}.env", value["env"]).items():
            out.env[name] = check_str(f"{path}.env.{name}", env_value)
    if value.get("excludes") is not None:
        if not isinstance(value["excludes"], list):
            raise OptionError(f"{path}.excludes: expected a list of patterns, got "
                              f"{type_name(value['excludes'])}")
        out.excludes.extend(check_str(f"{path}.excludes[{i}]", pattern)
                            for i, pattern in enumerate(value["excludes"]))
    if value.get("placement") is not None:
        ppath = f"{path}.placement"
        placement = check_mapping(ppath, value["placement"])
        check_keys(ppath, placement, PLACEMENT_KEYS)
        for key in PLACEMENT_KEYS:
            items = placement.get(key) or []
            if not isinstance(items, list):
                raise OptionError(f"{ppath}.{key}: expected a list of strings, got "
                                  f"{type_name(items)}")
            getattr(out.placement, key).extend(
                check_str(f"{ppath}.{key}[{i}]", item) for i, item in enumerate(items))
    return out


def to_override(path: str, options: dict[str, Any], name: str = "",
                notes: Notes | None = None) -> application_pb2.DeploymentOverride:
    """Options (without `name`) as a DeploymentOverride; OptionError on a bad one.

    Ray Serve's names are accepted (servefleet/_private/ray_options.py); `notes` hears
    of the renamed and the unused ones (default: a DeprecationWarning, or a
    log line once per option). `route_prefix` is not part of the override:
    `servefleet.run` reads it from the options themselves."""
    options = normalize_options(path, options, notes)
    options.pop("route_prefix", None)
    out = application_pb2.DeploymentOverride(name=name)
    config = out.replica_config
    for key in INT_OPTIONS:
        if key in options:
            setattr(config, key, check_int(f"{path}.{key}", options[key], INT_BOUNDS[key]))
    for key in FLOAT_OPTIONS:
        if key in options:
            setattr(config, key, check_float(f"{path}.{key}", options[key]))
    if "user_config" in options and options["user_config"] is not None:
        config.user_config_json = to_json(f"{path}.user_config", options["user_config"])
    if options.get("autoscaling_config") is not None:
        apath = f"{path}.autoscaling_config"
        autoscaling = check_mapping(apath, options["autoscaling_config"])
        check_keys(apath, autoscaling, (*AUTOSCALING_INT, *AUTOSCALING_FLOAT, *AUTOSCALING_STR))
        for key in AUTOSCALING_INT:
            if key in autoscaling:
                setattr(config.autoscaling_config, key,
                        check_int(f"{apath}.{key}", autoscaling[key], INT_BOUNDS[key]))
        for key in AUTOSCALING_FLOAT:
            if key in autoscaling:
                setattr(config.autoscaling_config, key,
                        check_float(f"{apath}.{key}", autoscaling[key]))
        for key in AUTOSCALING_STR:
            if key in autoscaling:
                setattr(config.autoscaling_config, key,
                        check_str(f"{apath}.{key}", autoscaling[key]))
    if options.get("retry_methods") is not None:
        methods = options["retry_methods"]
        if not isinstance(methods, list):
            raise OptionError(f"{path}.retry_methods: expected a list of HTTP methods, got "
                              f"{type_name(methods)}")
        config.retry_methods.extend(check_str(f"{path}.retry_methods[{i}]", m).upper()
                                    for i, m in enumerate(methods))
    if options.get("request_router") is not None:
        config.request_router = check_str(f"{path}.request_router", options["request_router"])
    if options.get("request_router_kwargs") is not None:
        config.request_router_kwargs_json = to_json(
            f"{path}.request_router_kwargs",
            check_mapping(f"{path}.request_router_kwargs", options["request_router_kwargs"]))
    if options.get("version") is not None:
        out.version = check_str(f"{path}.version", options["version"])
    if options.get("runtime") is not None:
        out.runtime.CopyFrom(to_runtime(f"{path}.runtime", options["runtime"]))
    if options.get("resources") is not None:
        rpath = f"{path}.resources"
        resources = check_mapping(rpath, options["resources"])
        check_keys(rpath, resources, RESOURCE_OPTIONS)
        for key in ("num_cpus", "num_gpus"):
            if key in resources:
                setattr(config.resources, key, check_non_negative(f"{rpath}.{key}",
                                                                  resources[key]))
        if "memory_bytes" in resources:
            config.resources.memory_bytes = check_int(f"{rpath}.memory_bytes",
                                                      resources["memory_bytes"], (0, 2**50))
    return out
