"""Per-deployment options as users write them, and their protobuf form.

The same option names are accepted by `@deployment(...)` and `.options(...)`
in code, by the `deployments[]` entries of a config file, and (as JSON, from
the build step) by the controller. `to_override` checks names and types and
returns a `DeploymentOverride` whose unset fields mean "not given", so that
overrides can be layered with protobuf's MergeFrom: later layers win field by
field (config file > code > defaults).

Errors are `OptionError` naming the path of the bad value, e.g.
`applications[0].deployments[1].num_replicas: expected an integer, got 'two'`.
Integer options are checked against their bounds here too (a value outside
them would otherwise fail inside protobuf with a message naming nothing);
the controller's validation of the full spec (controller/spec.py) checks
the same bounds and everything else.
"""

from __future__ import annotations

import json
from typing import Any

from servefleet.v1 import application_pb2, deployment_pb2


class OptionError(ValueError):
    """A bad option; the message starts with the path of the value."""


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
DEPLOYMENT_OPTIONS = (*INT_OPTIONS, *FLOAT_OPTIONS, "user_config", "autoscaling_config",
                      "version", "runtime", "retry_methods")


def _type_name(value: Any) -> str:
    return f"{value!r}" if isinstance(value, str | int | float | bool) else type(value).__name__


def check_int(path: str, value: Any, bounds: tuple[int, int] | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(f"{path}: expected an integer, got {_type_name(value)}")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        note = " (-1: no limit)" if bounds[0] == -1 else ""
        raise OptionError(f"{path}: must be between {bounds[0]} and {bounds[1]}{note}, "
                          f"got {value}")
    return value


def check_float(path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionError(f"{path}: expected a number, got {_type_name(value)}")
    return float(value)


def check_bool(path: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise OptionError(f"{path}: expected true or false, got {_type_name(value)}")
    return value


def check_str(path: str, value: Any) -> str:
    if not isinstance(value, str):
        raise OptionError(f"{path}: expected a string, got {_type_name(value)}")
    return value


def check_mapping(path: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OptionError(f"{path}: expected a mapping, got {_type_name(value)}")
    for key in value:
        if not isinstance(key, str):
            raise OptionError(f"{path}: keys must be strings, got {_type_name(key)}")
    return value


def check_keys(path: str, value: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in value:
        if key not in allowed:
            raise OptionError(f"{path}.{key}: unknown key (expected one of "
                              f"{', '.join(allowed)})")


def to_json(path: str, value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise OptionError(f"{path}: must be JSON-serializable ({e})") from None


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
                              f"{_type_name(value['excludes'])}")
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
                                  f"{_type_name(items)}")
            getattr(out.placement, key).extend(
                check_str(f"{ppath}.{key}[{i}]", item) for i, item in enumerate(items))
    return out


def to_override(path: str, options: dict[str, Any], name: str = ""
                ) -> application_pb2.DeploymentOverride:
    """Options (without `name`) as a DeploymentOverride; OptionError on a bad one."""
    options = check_mapping(path, options)
    check_keys(path, options, DEPLOYMENT_OPTIONS)
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
                              f"{_type_name(methods)}")
        config.retry_methods.extend(check_str(f"{path}.retry_methods[{i}]", m).upper()
                                    for i, m in enumerate(methods))
    if options.get("version") is not None:
        out.version = check_str(f"{path}.version", options["version"])
    if options.get("runtime") is not None:
        out.runtime.CopyFrom(to_runtime(f"{path}.runtime", options["runtime"]))
    return out
