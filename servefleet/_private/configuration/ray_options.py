"""Ray Serve's deployment options, as its users write them, in servefleet's terms.

A program or config file written for Ray Serve passes options of three kinds:
those servefleet has under the same name (num_replicas, max_ongoing_requests,
user_config, autoscaling_config, the health-check and shutdown timings,
version), those Ray has renamed since (its deprecated keys, still accepted
there), and those about scheduling on a Ray cluster (logical CPUs, placement
groups, per-node limits), which mean nothing where each replica is a process
or container. `normalize_options` takes all three and returns servefleet's
own option names, so that everything after it (servefleet/_private/configuration/options.py,
the controller) knows one vocabulary:

- `num_replicas="auto"`: autoscaling with Ray's defaults (min_replicas 1,
  max_replicas 100, target_ongoing_requests 2), the `autoscaling_config`
  fields given laid over them.
- Renamed (DeprecationWarning naming the new key): `max_concurrent_queries`
  -> `max_ongoing_requests`; in autoscaling_config
  `target_num_ongoing_requests_per_replica` -> `target_ongoing_requests`,
  `upscale_smoothing_factor` / `downscale_smoothing_factor` ->
  `upscaling_factor` / `downscaling_factor`, and `smoothing_factor` -> both
  factors where nothing more specific is given (Ray's order).
- autoscaling `policy`: "module:function", Ray's dotted "module.function",
  `{"name": ...}`, or the function itself (by its import path). Ray's own
  default policy (`ray.serve...`) is servefleet's built-in one.
- `request_router_config` (Ray's RequestRouterConfig): `request_router` and
  `request_router_kwargs`; Ray's own PowerOfTwoChoicesRequestRouter and
  ray.serve.llm's PrefixCacheAffinityRouter are the built-ins power_of_two
  and prefix_affinity (`_ray_router`).
- `route_prefix` (DeprecationWarning: Ray moved it to the application): kept
  in the options for `servefleet.run` / `serve.run`, which serve the ingress
  there when given no route_prefix of their own; not part of a spec.
- `ray_actor_options`: `runtime_env` becomes the deployment's `runtime`
  (`runtime_from_ray_env`); `num_gpus` becomes `resources.num_gpus` (GPUs for
  Docker and Swarm replicas; the process runtime restricts none). `num_cpus`
  becomes the replica's CPU threads (`runtime.env` OMP_NUM_THREADS, rounded
  up, unless the env sets it), as Ray sets them; not a limit: servefleet's
  resources are hard limits in Docker, and a replica Ray gives 0.2 logical
  CPUs must not be throttled to a fifth of a core. `memory`, `resources` and
  `accelerator_type` are noted and not used (logical amounts for Ray's
  scheduler).
- Noted and not used: `placement_group_bundles`, `placement_group_strategy`,
  `max_replicas_per_node` (placement belongs to the runtime:
  `runtime.placement` on Swarm), `logging_config` (replicas log as the
  controller's --log-format says), `max_constructor_retry_count`
  (failed starts are retried with backoff), autoscaling `prometheus_metrics`.
  Their values are still checked as Ray checks them.

Every key, and why an unused one is not used, is in the table of
servefleet/_private/configuration/option_fields.py (marked as Ray's there).

"Noted" means once per option and process, as a log line on the logger
`servefleet._private.configuration.options` (a program ported from Ray would otherwise print one for
each deployment); renamed keys raise a DeprecationWarning pointing at the
user's line. Config files pass their own `notes` and print each as a warning
line. A value of the wrong type is an OptionError naming its path, whatever
the kind of option.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from servefleet._private.configuration.field_table import check_field
from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.option_checks import (
    OptionError,
    check_float,
    check_int,
    check_keys,
    check_mapping,
    check_non_negative,
    check_str,
    check_str_list,
    type_name,
)
from servefleet._private.configuration.option_fields import (
    AUTOSCALING,
    DEPLOYMENT_OPTIONS,
    LOGGING,
    RAY_ACTOR,
    ROUTE_PREFIX_PATTERN,
    ROUTER_CONFIG,
)
from servefleet._private.configuration.option_notes import Note, Notes, default_notes
from servefleet._private.configuration.ray_runtime_env import runtime_from_ray_env

# Ray's num_replicas="auto": AutoscalingConfig.default() under the given fields.
AUTO_AUTOSCALING = {"min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2.0}
# The keys servefleet's own autoscaling_config has, and Ray's others.
AUTOSCALING_KEYS = AUTOSCALING.names(is_ray=False)
AUTOSCALING_RENAMED = {f.name: f.renamed_to for f in AUTOSCALING.fields if f.renamed_to}
AUTOSCALING_RAY_KEYS = AUTOSCALING.names(is_ray=True)
RENAMED = {f.name: f.renamed_to for f in DEPLOYMENT_OPTIONS.fields if f.renamed_to}
RAY_ACTOR_OPTIONS = RAY_ACTOR.keys
WHY_NOT_USED = {f.name: f.unused for section in (DEPLOYMENT_OPTIONS, AUTOSCALING, RAY_ACTOR)
                for f in section.fields if f.unused}
# Options servefleet has no use for (checked, then noted).
RAY_ONLY = tuple(f.name for f in DEPLOYMENT_OPTIONS.fields if f.unused)
PLACEMENT_STRATEGIES = DEPLOYMENT_OPTIONS["placement_group_strategy"].choices
LOGGING_KEYS = LOGGING.keys


def config_dict(path: str, value: Any) -> dict[str, Any]:
    """A mapping, or one of Ray's config objects (pydantic models, dataclasses)
    as the mapping of the fields it was given."""
    if isinstance(value, dict):
        return check_mapping(path, value)
    for method in ("model_dump", "dict"):  # pydantic 2, pydantic 1
        dump = getattr(value, method, None)
        if callable(dump):
            try:
                out = dump(exclude_unset=True)
            except TypeError:
                out = dump()
            return check_mapping(path, out)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)
                if getattr(value, f.name) is not None}
    raise OptionError(f"{path}: expected a mapping, got {type_name(value)}")


def normalize_options(path: str, options: Any, notes: Notes | None = None) -> dict[str, Any]:
    """`options` with Ray Serve's names translated to servefleet's (see the
    module's table), as JSON-ready data; OptionError naming the first bad
    value. Options servefleet does not use are left out; `route_prefix` is
    kept. Giving the same option under its old and new name is an error."""
    notes = default_notes if notes is None else notes
    options = check_mapping(path, options)
    if "deployment_actors" in options:  # code's are taken out first (api.py, ray_actors.py)
        check_field(f"{path}.deployment_actors", DEPLOYMENT_OPTIONS["deployment_actors"],
                    options["deployment_actors"])
    check_keys(path, options, DEPLOYMENT_OPTIONS.keys)
    out: dict[str, Any] = {}
    cpus = 0.0
    for key, value in options.items():
        where = f"{path}.{key}"
        if key in RENAMED:
            new = RENAMED[key]
            if new in options:
                raise OptionError(f"{where}: give {new} only ({key} is its old name)")
            notes(Note(key, f"{where}: deprecated, use {new}", True))
            out[new] = value
        elif key == "route_prefix":
            out[key] = _route_prefix(where, value)
            notes(Note(key, f"{where}: deprecated on a deployment; give route_prefix to "
                            "serve.run, or to the application in a config file", True))
        elif key == "ray_actor_options":
            if value is not None:
                cpus = _actor_options(where, value, notes, out, options)
        elif key in RAY_ONLY:
            if value is not None:
                _check_ray_only(where, key, value, options)
                notes(Note(key, f"{where}: not used: {WHY_NOT_USED[key]}", False))
        elif key == "autoscaling_config":
            if value is not None:
                out[key] = normalize_autoscaling(where, value, notes)
        elif key == "request_router_config":
            if value is not None:
                out.update(_router_config(where, value, notes))
        elif key == "backpressure_config":
            if value is not None:  # Ray's BackpressureConfig, or its fields
                out[key] = config_dict(where, value)
        elif key in ("num_replicas", "user_config", "version", "runtime", "retry_methods",
                     "resources"):
            if value is not None:
                out[key] = value
        else:
            out[key] = value
    if cpus:  # as Ray does, the CPUs an actor asks for are its threads (runtime/threads.py)
        runtime = dict(out.get("runtime") or {})
        runtime["env"] = {"OMP_NUM_THREADS": str(math.ceil(cpus)), **(runtime.get("env") or {})}
        out["runtime"] = runtime
    if out.get("num_replicas") == "auto":
        del out["num_replicas"]
        out["autoscaling_config"] = {**AUTO_AUTOSCALING, **(out.get("autoscaling_config") or {})}
    # A fixed num_replicas beside an autoscaling_config is refused by the
    # controller (a spec has one or the other), not here: `Deployment.options`
    # merges what the decorator gave with what it is given (see merge_options).
    return out


def merge_options(base: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new` laid over `base`, as `Deployment.options(**new)` does in Ray: a
    key in `new` wins, under its old or new name; a replica count in `new`
    (`num_replicas` other than "auto") drops an autoscaling_config from
    `base`, and an autoscaling_config in `new` drops a fixed num_replicas."""
    out = dict(base)
    for old, current in RENAMED.items():
        if old in new or current in new:
            out.pop(old, None)
            out.pop(current, None)
    if new.get("num_replicas") not in (None, "auto"):
        out.pop("autoscaling_config", None)
    if new.get("autoscaling_config") is not None and out.get("num_replicas") != "auto":
        out.pop("num_replicas", None)
    out.update(new)
    return out


def normalize_autoscaling(path: str, value: Any, notes: Notes) -> dict[str, Any]:
    """Ray's autoscaling_config (a mapping or its AutoscalingConfig) with
    servefleet's key names; None values count as not given, as in Ray."""
    given = {k: v for k, v in config_dict(path, value).items() if v is not None}
    check_keys(path, given, (*AUTOSCALING_KEYS, *AUTOSCALING_RAY_KEYS))
    out = {k: v for k, v in given.items() if k in AUTOSCALING_KEYS}
    for old, new in AUTOSCALING_RENAMED.items():
        if old in given:
            if new in given:
                raise OptionError(f"{path}.{old}: give {new} only ({old} is its old name)")
            notes(Note(old, f"{path}.{old}: deprecated, use {new}", True))
            out[new] = given[old]
    if "smoothing_factor" in given:
        factor = check_float(f"{path}.smoothing_factor", given["smoothing_factor"])
        notes(Note("smoothing_factor", f"{path}.smoothing_factor: deprecated, use "
                                       "upscaling_factor and downscaling_factor", True))
        for key in ("upscaling_factor", "downscaling_factor"):
            out.setdefault(key, factor)
    if "prometheus_metrics" in given:
        check_str_list(f"{path}.prometheus_metrics", given["prometheus_metrics"], "metric names")
        notes(Note("prometheus_metrics", f"{path}.prometheus_metrics: not used: "
                                         f"{WHY_NOT_USED['prometheus_metrics']}", False))
    if "policy" in out:
        policy = _policy(f"{path}.policy", out.pop("policy"), notes)
        if policy:
            out["policy"] = policy
    return out


def _policy(path: str, value: Any, notes: Notes) -> str:
    """A custom policy as "module:function"; "" for Ray's default policy."""
    if isinstance(value, dict) or callable(getattr(value, "model_dump", None)) \
            or callable(getattr(value, "dict", None)):  # Ray's AutoscalingPolicy
        spec = config_dict(path, value)
        check_keys(path, spec, ("name",))
        path, value = f"{path}.name", spec.get("name")
    if callable(value) and not isinstance(value, str):
        value = f"{value.__module__}:{value.__qualname__}"
    name = colon_form(check_str(path, value))
    if name.startswith(("ray.serve.", "ray.serve:")):
        notes(Note("policy", f"{path}: Ray's default policy: servefleet's built-in policy "
                             "takes its place", False))
        return ""
    return name


def _route_prefix(path: str, value: Any) -> str | None:
    """Ray's rule for a route prefix: None (no HTTP route), or a path that
    starts with "/", does not end with one (unless it is "/"), and has no "{"
    or "}"."""
    if value is None:
        return None
    prefix = check_str(path, value)
    if not re.search(ROUTE_PREFIX_PATTERN, prefix):
        raise OptionError(f"{path}: must start with \"/\", not end with one (unless it is "
                          f"just \"/\") and hold no \"{{\" or \"}}\", got {prefix!r}")
    return prefix


def _actor_options(path: str, value: Any, notes: Notes, out: dict[str, Any],
                   options: dict[str, Any]) -> float:
    """ray_actor_options: its runtime_env as `runtime`, num_gpus as
    `resources.num_gpus`; the rest checked and noted as not used. Returns
    num_cpus (0 when not given): the replica's CPU threads, as in Ray."""
    actor = check_mapping(path, value)
    check_keys(path, actor, RAY_ACTOR_OPTIONS)
    cpus = 0.0
    for key, item in actor.items():
        where = f"{path}.{key}"
        if item is None:
            continue
        if key == "num_cpus":
            cpus = float(check_field(where, RAY_ACTOR[key], item))
        elif key == "runtime_env":
            if options.get("runtime") is not None:
                raise OptionError(f"{where}: give runtime or ray_actor_options.runtime_env, "
                                  "not both")
            out["runtime"] = runtime_from_ray_env(where, item, notes)
        elif key == "num_gpus":
            if options.get("resources") is not None:
                raise OptionError(f"{where}: give resources or ray_actor_options.num_gpus, "
                                  "not both")
            gpus = check_field(where, RAY_ACTOR[key], item)
            if gpus:  # 0, Ray's default, asks for none
                out["resources"] = {"num_gpus": gpus}
        else:
            check_field(where, RAY_ACTOR[key], item)
            notes(Note(f"ray_actor_options.{key}",
                       f"{where}: not used: {WHY_NOT_USED[key]}", False))
    return cpus


def _check_ray_only(path: str, key: str, value: Any, options: dict[str, Any]) -> None:
    """The types Ray requires of the options servefleet does not use, so that
    a program refused by Ray is refused here too."""
    if key == "placement_group_bundles":
        if not isinstance(value, list) or not value:
            raise OptionError(f"{path}: expected a non-empty list of bundles "
                              "(mappings of resource to amount)")
        for i, bundle in enumerate(value):
            for name, amount in check_mapping(f"{path}[{i}]", bundle).items():
                check_non_negative(f"{path}[{i}].{name}", amount)
        if options.get("max_replicas_per_node") is not None:
            raise OptionError(f"{path}: cannot be set together with max_replicas_per_node")
    elif key == "placement_group_strategy":
        if check_str(path, value) not in PLACEMENT_STRATEGIES:
            raise OptionError(f"{path}: must be one of {', '.join(PLACEMENT_STRATEGIES)}, "
                              f"got {value!r}")
        if options.get("placement_group_bundles") is None:
            raise OptionError(f"{path}: needs placement_group_bundles")
    elif key == "max_replicas_per_node":
        check_int(path, value, DEPLOYMENT_OPTIONS[key].bounds)
    elif key == "logging_config":
        logging_config = config_dict(path, value)
        check_keys(path, logging_config, LOGGING_KEYS)
    elif key == "max_constructor_retry_count":
        check_int(path, value, DEPLOYMENT_OPTIONS[key].bounds)


def _router_config(path: str, value: Any, notes: Notes) -> dict[str, Any]:
    """Ray's RequestRouterConfig (or its dict) as servefleet's request_router
    options: the class (or its import path) and its kwargs. Ray's own routers
    are servefleet's built-ins: its power of two choices is "power_of_two",
    ray.serve.llm's PrefixCacheAffinityRouter "prefix_affinity" (its
    imbalanced_threshold is imbalance_threshold; its prefix tree's match and
    eviction settings are noted and not used: the index is bounded by
    max_blocks)."""
    config = config_dict(path, value)
    check_keys(path, config, ROUTER_CONFIG.keys)
    out: dict[str, Any] = {}
    router = config.get("request_router_class")
    if router is not None:
        out["request_router"] = colon_form(router) if isinstance(router, str) else \
            f"{router.__module__}:{router.__qualname__}" if hasattr(router, "__qualname__") \
            else check_str(f"{path}.request_router_class", router)  # the error: a number
    if config.get("request_router_kwargs") is not None:
        out["request_router_kwargs"] = config["request_router_kwargs"]
    name = out.get("request_router", "")
    if name.startswith(("ray.serve.", "ray.serve:")):
        out.update(_ray_router(path, name, out.get("request_router_kwargs"), notes))
    for key in sorted(set(config) - {"request_router_class", "request_router_kwargs"}):
        if config[key] is not None:  # Ray's backoff and routing-stats settings
            notes(Note(key, f"{path}.{key}: not used: servefleet's routers take no backoff or "
                            "routing-stats settings", False))
    return out


RAY_PREFIX_ROUTER_UNUSED = ("match_rate_threshold", "do_eviction", "eviction_threshold_chars",
                            "eviction_target_chars", "eviction_interval_secs")


def _ray_router(path: str, name: str, kwargs: Any, notes: Notes) -> dict[str, Any]:
    """One of Ray's routers named by its import path, as servefleet's built-in."""
    cls = name.rpartition(":")[2]
    where = f"{path}.request_router_kwargs"
    if cls == "PowerOfTwoChoicesRequestRouter":
        if kwargs:
            raise OptionError(f"{where}: Ray's PowerOfTwoChoicesRequestRouter takes none")
        return {"request_router": "power_of_two", "request_router_kwargs": {}}
    if cls != "PrefixCacheAffinityRouter":
        raise OptionError(f"{path}.request_router_class: {name!r} is a Ray router servefleet "
                          "does not have (PowerOfTwoChoicesRequestRouter and "
                          "PrefixCacheAffinityRouter are power_of_two and prefix_affinity)")
    given = check_mapping(where, kwargs or {})
    check_keys(where, given, ("imbalanced_threshold", *RAY_PREFIX_ROUTER_UNUSED))
    mapped: dict[str, Any] = {}
    for key, value in given.items():
        if key == "imbalanced_threshold":
            # Ray's is a number of requests; servefleet's an integer one.
            mapped["imbalance_threshold"] = math.floor(min(check_non_negative(
                f"{where}.{key}", value), 1_000_000))
        else:
            notes(Note(key, f"{where}.{key}: not used: servefleet's prefix index is bounded "
                            "by max_blocks", False))
    return {"request_router": "prefix_affinity", "request_router_kwargs": mapped}
