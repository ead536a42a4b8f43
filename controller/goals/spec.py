"""From a client's DeploymentSpec to the goal the controller stores.

`normalize_spec` validates every field and returns a new spec with all
defaults filled in, JSON fields in canonical form and prev_version cleared,
so that two specs meaning the same thing compare equal (Deploy's
idempotence rests on that). The first broken rule raises InvalidArgument with
the field's path, e.g. `spec.replica_config.max_ongoing_requests: must be
between 1 and 100000, got 0`.

Defaults follow Ray Serve's (serve/config.py, serve/_private/constants.py as
of Ray 2.x): max_ongoing_requests 5, max_queued_requests -1 (no limit),
graceful shutdown 20 s with a 2 s wait loop, health checks every 10 s with a
30 s timeout, autoscaling target of 2 ongoing requests per replica.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from servefleet._private.applications.by_value import MAX_BY_VALUE_BYTES
from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.options import MAX_ONGOING, MAX_QUEUED, MAX_REPLICAS
from servefleet._private.dataplane.router_names import BUILTIN_ROUTERS
from servefleet.v1 import deployment_pb2 as pb
from servefleet.v1 import records_pb2

from ..errors import InvalidArgument
from .grpc_fields import IMPORT_PATH_RE, check_grpc

DEFAULT_APPLICATION = "default"

NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$")
NAME_RULE = ("must be 1-63 letters, digits, '-' or '_', starting and ending "
             "with a letter or digit")
# Swarm's placement: `node.<attr>[.<more>] ==|!= value`, and attributes to spread over.
_NODE_ATTR = r"(node|engine)\.[A-Za-z0-9_.-]+"
PLACEMENT_CONSTRAINT_RE = re.compile(rf"^{_NODE_ATTR}\s*(==|!=)\s*[\x21-\x7e]+$")
PLACEMENT_SPREAD_RE = re.compile(rf"^{_NODE_ATTR}$")
VERSION_RE = re.compile(r"^[\x21-\x7e]{1,128}$")
ROUTE_SEGMENT = r"[A-Za-z0-9._~!$&'()*+,;=:@%-]+"
ROUTE_PREFIX_RE = re.compile(rf"^/({ROUTE_SEGMENT}(/{ROUTE_SEGMENT})*)?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A Docker image reference: [registry[:port]/]name[:tag][@digest], lower-case name.
IMAGE_RE = re.compile(r"^[a-z0-9]([a-z0-9._/-]*[a-z0-9])?(:[0-9]+/[a-z0-9._/-]+)?"
                      r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$")

MAX_JSON_BYTES = 256 * 1024
MAX_SPEC_BYTES = 1024 * 1024  # etcd refuses requests over 1.5 MiB by default
MAX_SECONDS = 86_400.0
MAX_ENV_VARS = 256
MAX_EXCLUDES = 256
MAX_CUSTOM_RESOURCES = 32

_REPLICA_DEFAULTS: dict[str, float] = {
    "num_replicas": 1,
    "max_ongoing_requests": 5,
    "max_queued_requests": -1,
    "graceful_shutdown_timeout_s": 20.0,
    "graceful_shutdown_wait_loop_s": 2.0,
    "health_check_period_s": 10.0,
    "health_check_timeout_s": 30.0,
    "startup_timeout_s": 300.0,
}

# The methods a replica_config's retry_methods may list (upper case, as on the wire).
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")

_AUTOSCALING_DEFAULTS: dict[str, float] = {
    "min_replicas": 1,
    "max_replicas": 1,
    "target_ongoing_requests": 2.0,
    "upscale_delay_s": 30.0,
    "downscale_delay_s": 600.0,
    "metrics_interval_s": 10.0,
    "look_back_period_s": 30.0,
    "upscaling_factor": 1.0,
    "downscaling_factor": 1.0,
}
AGGREGATION_FUNCTIONS = ("mean", "max", "min")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


def canonical_json(field: str, text: str, kind: type | None = None) -> str:
    """`text` parsed and re-serialised canonically; "" stays "" (unset)."""
    if not text:
        return ""
    if len(text.encode()) > MAX_JSON_BYTES:
        raise InvalidArgument(field, f"must be at most {MAX_JSON_BYTES} bytes")
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as e:
        raise InvalidArgument(field, f"must be valid JSON ({e})") from None
    if kind is not None and not isinstance(value, kind):
        expected = "array" if kind is list else "object"
        raise InvalidArgument(field, f"must be a JSON {expected}")
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        canonical.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(field, "must not contain unpaired UTF-16 surrogates") from None
    return canonical


def check_name(field: str, value: str) -> None:
    if not NAME_RE.fullmatch(value):
        raise InvalidArgument(field, f"{NAME_RULE}, got {value!r}")


def _check_range(field: str, value: float, low: float, high: float) -> None:
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidArgument(field, f"must be between {low:g} and {high:g}, got {value!r}")


def _check_positive(field: str, value: float, high: float) -> None:
    if not math.isfinite(value) or not 0 < value <= high:
        raise InvalidArgument(field, f"must be greater than 0 and at most {high:g}, got {value!r}")


def _fill(message: Any, defaults: dict[str, float]) -> None:
    for name, default in defaults.items():
        if not message.HasField(name):
            setattr(message, name, default)


def _normalize_autoscaling(field: str, config: pb.AutoscalingConfig) -> None:
    _fill(config, _AUTOSCALING_DEFAULTS)
    _check_range(f"{field}.max_replicas", config.max_replicas, 1, MAX_REPLICAS)
    _check_range(f"{field}.min_replicas", config.min_replicas, 0, config.max_replicas)
    if not config.HasField("initial_replicas"):
        config.initial_replicas = config.min_replicas
    _check_range(f"{field}.initial_replicas", config.initial_replicas,
                 config.min_replicas, config.max_replicas)
    _check_positive(f"{field}.target_ongoing_requests", config.target_ongoing_requests,
                    MAX_ONGOING)
    for name in ("upscale_delay_s", "downscale_delay_s"):
        _check_range(f"{field}.{name}", getattr(config, name), 0, MAX_SECONDS)
    for name in ("metrics_interval_s", "look_back_period_s"):
        _check_positive(f"{field}.{name}", getattr(config, name), MAX_SECONDS)
    for name in ("upscaling_factor", "downscaling_factor"):
        _check_positive(f"{field}.{name}", getattr(config, name), 100)
    if not config.HasField("downscale_to_zero_delay_s"):
        config.downscale_to_zero_delay_s = config.downscale_delay_s
    _check_range(f"{field}.downscale_to_zero_delay_s", config.downscale_to_zero_delay_s, 0,
                 MAX_SECONDS)
    if not config.HasField("aggregation_function"):
        config.aggregation_function = "mean"
    config.aggregation_function = config.aggregation_function.lower()
    if config.aggregation_function not in AGGREGATION_FUNCTIONS:
        raise InvalidArgument(f"{field}.aggregation_function",
                              f"must be one of {', '.join(AGGREGATION_FUNCTIONS)}, "
                              f"got {config.aggregation_function!r}")
    if config.policy and not IMPORT_PATH_RE.match(config.policy):
        raise InvalidArgument(f"{field}.policy", "must be 'module:function' (for example "
                              f"'my_policies:by_queue'), got {config.policy!r}")


def _normalize_resources(field: str, res: pb.Resources) -> None:
    _check_range(f"{field}.num_cpus", res.num_cpus, 0, 1024)
    _check_range(f"{field}.num_gpus", res.num_gpus, 0, 64)
    _check_range(f"{field}.memory_bytes", res.memory_bytes, 0, 2**50)
    if len(res.custom) > MAX_CUSTOM_RESOURCES:
        raise InvalidArgument(f"{field}.custom", f"at most {MAX_CUSTOM_RESOURCES} entries")
    for key, amount in res.custom.items():
        check_name(f"{field}.custom[{key!r}]", key)
        _check_range(f"{field}.custom[{key!r}]", amount, 0, 1e9)


def _normalize_replica_config(field: str, config: pb.ReplicaConfig) -> None:
    autoscaling = config.HasField("autoscaling_config")
    if autoscaling and config.HasField("num_replicas"):
        raise InvalidArgument(f"{field}.num_replicas",
                              "must be unset when autoscaling_config is set")
    if autoscaling:
        _normalize_autoscaling(f"{field}.autoscaling_config", config.autoscaling_config)
    defaults = dict(_REPLICA_DEFAULTS)
    if autoscaling:
        defaults.pop("num_replicas")
    _fill(config, defaults)
    if config.HasField("num_replicas"):
        _check_range(f"{field}.num_replicas", config.num_replicas, 0, MAX_REPLICAS)
    _check_range(f"{field}.max_ongoing_requests", config.max_ongoing_requests, 1, MAX_ONGOING)
    if config.max_queued_requests != -1:
        _check_range(f"{field}.max_queued_requests", config.max_queued_requests, 0, MAX_QUEUED)
    _check_range(f"{field}.graceful_shutdown_timeout_s", config.graceful_shutdown_timeout_s,
                 0, MAX_SECONDS)
    for name in ("graceful_shutdown_wait_loop_s", "health_check_period_s",
                 "health_check_timeout_s", "startup_timeout_s"):
        _check_positive(f"{field}.{name}", getattr(config, name), MAX_SECONDS)
    config.user_config_json = canonical_json(f"{field}.user_config_json",
                                             config.user_config_json)
    _normalize_resources(f"{field}.resources", config.resources)
    _check_retry_methods(f"{field}.retry_methods", config.retry_methods)
    _check_router(field, config)
    _check_backpressure(f"{field}.backpressure", config)


def _check_backpressure(field: str, config: pb.ReplicaConfig) -> None:
    """Ray's BackpressureConfig: status 503 (0: the default) or 429, a
    Retry-After of at least 0 s; an empty one is none, so specs compare equal."""
    backpressure = config.backpressure
    if backpressure.status_code not in (0, 429, 503):
        raise InvalidArgument(f"{field}.status_code",
                              f"must be 503 or 429, got {backpressure.status_code}")
    if backpressure.status_code == 503:
        backpressure.status_code = 0
    if backpressure.HasField("retry_after_s"):
        _check_range(f"{field}.retry_after_s", backpressure.retry_after_s, 0, MAX_SECONDS)
    if not backpressure.status_code and not backpressure.HasField("retry_after_s"):
        config.ClearField("backpressure")


def _check_router(field: str, config: pb.ReplicaConfig) -> None:
    """The router: a built-in name or a class's import path; its kwargs an object."""
    router = config.request_router = colon_form(config.request_router.strip())
    if router and router not in BUILTIN_ROUTERS and (
            not IMPORT_PATH_RE.fullmatch(router) or len(router) > 512):
        raise InvalidArgument(f"{field}.request_router",
                              f"must be one of {', '.join(BUILTIN_ROUTERS)} or a class as "
                              f"'module:Class', got {router[:200]!r}")
    config.request_router_kwargs_json = canonical_json(
        f"{field}.request_router_kwargs_json", config.request_router_kwargs_json, dict)


def _check_retry_methods(field: str, methods: Sequence[str]) -> None:
    for i, method in enumerate(methods):
        if method not in HTTP_METHODS:
            raise InvalidArgument(f"{field}[{i}]", f"must be one of {', '.join(HTTP_METHODS)}, "
                                  f"got {method[:40]!r}")
        if method in methods[:i]:
            raise InvalidArgument(f"{field}[{i}]", f"{method} is listed twice")


def _normalize_runtime(field: str, runtime: pb.RuntimeOptions) -> None:
    if runtime.working_dir and (not runtime.working_dir.startswith("/")
                                or len(runtime.working_dir) > 4096 or "\0" in runtime.working_dir):
        raise InvalidArgument(f"{field}.working_dir",
                              "must be an absolute path of at most 4096 characters")
    if runtime.image and (len(runtime.image) > 255 or not IMAGE_RE.fullmatch(runtime.image)):
        raise InvalidArgument(f"{field}.image", "must be a Docker image reference such as "
                              f"'servefleet:latest' or 'registry:5000/team/model:v2', "
                              f"got {runtime.image!r}")
    if len(runtime.excludes) > MAX_EXCLUDES:
        raise InvalidArgument(f"{field}.excludes", f"at most {MAX_EXCLUDES} patterns")
    for i, pattern in enumerate(runtime.excludes):
        if not 0 < len(pattern) <= 256 or "\0" in pattern or pattern == "!":
            raise InvalidArgument(f"{field}.excludes[{i}]",
                                  "must be 1-256 characters without NUL, and not a lone '!', "
                                  f"got {pattern!r}")
    placement = runtime.placement
    for key, most, rule in (("constraints", 32, PLACEMENT_CONSTRAINT_RE),
                            ("spread", 8, PLACEMENT_SPREAD_RE)):
        items = getattr(placement, key)
        if len(items) > most:
            raise InvalidArgument(f"{field}.placement.{key}", f"at most {most}")
        for i, item in enumerate(items):
            if len(item) > 256 or not rule.fullmatch(item):
                raise InvalidArgument(
                    f"{field}.placement.{key}[{i}]",
                    "must be a node attribute and a comparison, as Docker writes them "
                    "(node.labels.gpu == true)" if key == "constraints" else
                    "must be a node attribute to spread over (node.labels.zone)")
    if len(runtime.env) > MAX_ENV_VARS:
        raise InvalidArgument(f"{field}.env", f"at most {MAX_ENV_VARS} variables")
    for key, value in runtime.env.items():
        if not ENV_NAME_RE.fullmatch(key):
            raise InvalidArgument(f"{field}.env[{key!r}]",
                                  "names are letters, digits and '_', not starting with a digit")
        if "\0" in value or len(value) > 32 * 1024:
            raise InvalidArgument(f"{field}.env[{key!r}]",
                                  "values are at most 32768 characters without NUL")


def normalize_spec(spec: pb.DeploymentSpec) -> pb.DeploymentSpec:
    """The validated, complete form of `spec` (a new message; `spec` is unchanged)."""
    if spec.ByteSize() > MAX_SPEC_BYTES:
        raise InvalidArgument("spec", f"must be at most {MAX_SPEC_BYTES} bytes serialised")
    out = pb.DeploymentSpec()
    out.CopyFrom(spec)
    out.prev_version = ""
    check_name("spec.name", out.name)
    out.application = out.application or DEFAULT_APPLICATION
    check_name("spec.application", out.application)
    if not IMPORT_PATH_RE.fullmatch(out.import_path) or len(out.import_path) > 512:
        raise InvalidArgument("spec.import_path",
                              f"must look like 'package.module:attribute', got {out.import_path!r}")
    out.init_args_json = canonical_json("spec.init_args_json", out.init_args_json, list)
    out.init_kwargs_json = canonical_json("spec.init_kwargs_json", out.init_kwargs_json, dict)
    for field in ("version", "prev_version"):
        value = getattr(spec, field)
        if value and not VERSION_RE.fullmatch(value):
            raise InvalidArgument(f"spec.{field}",
                                  "must be 1-128 printable ASCII characters without spaces")
    if out.HasField("route_prefix") and (
            not ROUTE_PREFIX_RE.fullmatch(out.route_prefix) or len(out.route_prefix) > 256):
        raise InvalidArgument(
            "spec.route_prefix",
            "must start with '/', have no empty segments or trailing '/', "
            f"and be at most 256 URL path characters, got {out.route_prefix!r}")
    _normalize_replica_config("spec.replica_config", out.replica_config)
    _normalize_runtime("spec.runtime", out.runtime)
    _check_by_value(out)
    # Ray's dotted form (pkg.mod_pb2_grpc.add_XServicer_to_server) is stored as module:function.
    functions = [colon_form(path) for path in out.grpc_servicer_functions]
    if functions != list(out.grpc_servicer_functions):
        del out.grpc_servicer_functions[:]
        out.grpc_servicer_functions.extend(functions)
    check_grpc("spec", out.grpc_servicer_functions, out.grpc_services,
               out.grpc_streaming_methods, out.grpc_client_streaming_methods)
    return out


def _check_by_value(spec: pb.DeploymentSpec) -> None:
    """Bounded, and init args given one way only. (What the bytes hold is
    never looked at here: the controller does not unpickle.)"""
    by_value = spec.by_value
    size = len(by_value.target) + len(by_value.init_args)
    if size > MAX_BY_VALUE_BYTES:
        raise InvalidArgument("spec.by_value", f"must be at most {MAX_BY_VALUE_BYTES} bytes "
                              f"(target and init_args together), got {size}")
    if by_value.init_args and (spec.init_args_json or spec.init_kwargs_json):
        raise InvalidArgument("spec.by_value.init_args", "must be unset when init_args_json "
                              "or init_kwargs_json is set: init args are given one way")
    if not by_value.target and not by_value.init_args:
        spec.ClearField("by_value")  # an empty one means none: specs compare equal


def code_hash(spec: pb.DeploymentSpec) -> str:
    """A digest of what defines a replica's code; a change means new replicas."""
    code: dict[str, Any] = {
        "import_path": spec.import_path,
        "init_args": spec.init_args_json,
        "init_kwargs": spec.init_kwargs_json,
        "working_dir": spec.runtime.working_dir,
        "env": dict(sorted(spec.runtime.env.items())),
    }
    # Each only when set, so that hashes from before the field existed hold.
    if spec.runtime.image:
        code["image"] = spec.runtime.image
    if spec.runtime.working_dir_digest:  # the files under working_dir (code_digest.py)
        code["working_dir_files"] = spec.runtime.working_dir_digest
    if spec.grpc_servicer_functions:
        code["grpc_servicer_functions"] = list(spec.grpc_servicer_functions)
    if spec.by_value.target:  # code sent by value (servefleet.run of a script)
        code["by_value_target"] = hashlib.sha256(spec.by_value.target).hexdigest()
    if spec.by_value.init_args:
        code["by_value_init_args"] = hashlib.sha256(spec.by_value.init_args).hexdigest()
    if spec.runtime.HasField("placement"):  # where replicas run: new ones elsewhere
        code["placement"] = [list(spec.runtime.placement.constraints),
                             list(spec.runtime.placement.spread)]
    blob = json.dumps(code, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def target_replicas(record: records_pb2.DeploymentRecord) -> int:
    """How many replicas the stored goal asks for now: for an autoscaled
    deployment the autoscaler's last decision, or initial_replicas before it."""
    config = record.spec.replica_config
    if config.HasField("autoscaling_config"):
        if record.HasField("autoscale"):
            return record.autoscale.target_replicas
        return config.autoscaling_config.initial_replicas
    return config.num_replicas


def stored_version(spec: pb.DeploymentSpec) -> str:
    """The version Deploy reports: the user's, or one derived from the code."""
    return spec.version or code_hash(spec)
