"""Per-deployment options as users write them, and their protobuf form.

The same option names are accepted by `@deployment(...)` and `.options(...)`
in code, by the `deployments[]` entries of a config file, and (as JSON, from
the build step) by the controller. `to_override` first translates Ray Serve's
names (servefleet/_private/configuration/ray_options.py: its deprecated keys, num_replicas="auto",
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

The options' names, types and bounds are the table of
servefleet/_private/configuration/option_fields.py, which the config file's JSON Schema is
written from too.
"""

from __future__ import annotations

from typing import Any

from servefleet._private.configuration.field_table import check_field
from servefleet._private.configuration.option_checks import (
    OptionError,
    check_bool,
    check_float,
    check_int,
    check_keys,
    check_mapping,
    check_str,
    to_json,
)
from servefleet._private.configuration.option_fields import (
    AUTOSCALING,
    BACKPRESSURE,
    DEPLOYMENT_OPTIONS,
    MAX_ONGOING,
    MAX_QUEUED,
    MAX_REPLICAS,
    PLACEMENT,
    RESOURCES,
    RUNTIME,
    SERVEFLEET_OPTIONS,
)
from servefleet._private.configuration.option_notes import Notes
from servefleet._private.configuration.ray_options import normalize_options
from servefleet.v1 import application_pb2, deployment_pb2

# The checks are re-exported: config files and the controller import them here.
__all__ = ["DEPLOYMENT_OPTIONS", "MAX_ONGOING", "MAX_QUEUED", "MAX_REPLICAS",
           "SERVEFLEET_OPTIONS", "OptionError", "check_bool", "check_float", "check_int",
           "check_keys", "check_mapping", "check_str", "to_json", "to_override", "to_runtime"]

# The options set by one plain check each, in the replica config's fields.
PLAIN_OPTIONS = (*DEPLOYMENT_OPTIONS.names(kind="int", is_ray=False),
                 *DEPLOYMENT_OPTIONS.names(kind="number", is_ray=False))
AUTOSCALING_OWN = AUTOSCALING.names(is_ray=False)
RUNTIME_OPTIONS = RUNTIME.keys
PLACEMENT_KEYS = PLACEMENT.keys
# What one replica needs from its host: limits for Docker and Swarm replicas
# (controller/runtime/docker.py, swarm.py); the process runtime sets none.
RESOURCE_OPTIONS = RESOURCES.keys


def to_runtime(path: str, value: Any) -> deployment_pb2.RuntimeOptions:
    value = check_mapping(path, value)
    check_keys(path, value, RUNTIME_OPTIONS)
    out = deployment_pb2.RuntimeOptions()
    for key in ("working_dir", "image"):
        if key in value:
            setattr(out, key, check_field(f"{path}.{key}", RUNTIME[key], value[key]))
    if "env" in value:
        out.env.update(check_field(f"{path}.env", RUNTIME["env"], value["env"]))
    if value.get("excludes") is not None:
        out.excludes.extend(check_field(f"{path}.excludes", RUNTIME["excludes"],
                                        value["excludes"]))
    if value.get("placement") is not None:
        ppath = f"{path}.placement"
        placement = check_mapping(ppath, value["placement"])
        check_keys(ppath, placement, PLACEMENT_KEYS)
        for key in PLACEMENT_KEYS:
            getattr(out.placement, key).extend(
                check_field(f"{ppath}.{key}", PLACEMENT[key], placement.get(key)) or [])
    return out


def to_override(path: str, options: dict[str, Any], name: str = "",
                notes: Notes | None = None) -> application_pb2.DeploymentOverride:
    """Options (without `name`) as a DeploymentOverride; OptionError on a bad one.

    Ray Serve's names are accepted (servefleet/_private/configuration/ray_options.py); `notes` hears
    of the renamed and the unused ones (default: a DeprecationWarning, or a
    log line once per option). `route_prefix` is not part of the override:
    `servefleet.run` reads it from the options themselves."""
    options = normalize_options(path, options, notes)
    options.pop("route_prefix", None)
    out = application_pb2.DeploymentOverride(name=name)
    config = out.replica_config
    for key in PLAIN_OPTIONS:
        if key in options:
            spec = DEPLOYMENT_OPTIONS[key]
            # normalize_options took num_replicas's "auto" and null: an int is left.
            setattr(config, key, check_int(f"{path}.{key}", options[key], spec.bounds)
                    if spec.kind == "int" else check_field(f"{path}.{key}", spec, options[key]))
    if "user_config" in options and options["user_config"] is not None:
        config.user_config_json = to_json(f"{path}.user_config", options["user_config"])
    if options.get("autoscaling_config") is not None:
        apath = f"{path}.autoscaling_config"
        autoscaling = check_mapping(apath, options["autoscaling_config"])
        check_keys(apath, autoscaling, AUTOSCALING_OWN)
        for key in AUTOSCALING_OWN:  # normalize_autoscaling dropped the nulls
            if key in autoscaling:
                setattr(config.autoscaling_config, key,
                        check_field(f"{apath}.{key}", AUTOSCALING[key], autoscaling[key]))
    if options.get("retry_methods") is not None:
        config.retry_methods.extend(m.upper() for m in check_field(
            f"{path}.retry_methods", DEPLOYMENT_OPTIONS["retry_methods"],
            options["retry_methods"]))
    if options.get("request_router") is not None:
        config.request_router = check_str(f"{path}.request_router", options["request_router"])
    if options.get("request_router_kwargs") is not None:
        config.request_router_kwargs_json = to_json(
            f"{path}.request_router_kwargs",
            check_mapping(f"{path}.request_router_kwargs", options["request_router_kwargs"]))
    if options.get("backpressure_config") is not None:
        bpath = f"{path}.backpressure_config"
        backpressure = check_mapping(bpath, options["backpressure_config"])
        check_keys(bpath, backpressure, BACKPRESSURE.keys)
        if backpressure.get("status_code") is not None:
            config.backpressure.status_code = check_field(
                f"{bpath}.status_code", BACKPRESSURE["status_code"], backpressure["status_code"])
        if backpressure.get("retry_after_s") is not None:
            config.backpressure.retry_after_s = check_field(
                f"{bpath}.retry_after_s", BACKPRESSURE["retry_after_s"],
                backpressure["retry_after_s"])
    if options.get("version") is not None:
        out.version = check_str(f"{path}.version", options["version"])
    if options.get("runtime") is not None:
        out.runtime.CopyFrom(to_runtime(f"{path}.runtime", options["runtime"]))
    if options.get("resources") is not None:
        rpath = f"{path}.resources"
        resources = check_mapping(rpath, options["resources"])
        check_keys(rpath, resources, RESOURCE_OPTIONS)
        for key in RESOURCE_OPTIONS:
            if key in resources:
                setattr(config.resources, key,
                        check_field(f"{rpath}.{key}", RESOURCES[key], resources[key]))
    return out
