"""Config files: the YAML a user deploys, shaped like Ray Serve's `serve deploy` config.

    http_options:
      host: 127.0.0.1
      port: 8000
      request_timeout_s: 30
    grpc_options:                     # servefleet up's proxy serves gRPC here
      port: 9000
      grpc_servicer_functions:        # for applications that list none themselves
        - classifier_pb2_grpc:add_ClassifierServicer_to_server
    applications:
      - name: sentiment
        route_prefix: /sentiment      # null: no HTTP route; unset: "/"
        import_path: sentiment:app
        args: {}                      # for a builder function
        runtime:
          working_dir: .              # relative to this file
          env: {MODEL_SIZE: small}
        traffic:
          split: {Model: 90, Canary: 10}
          shadow: {deployment: Shadow, fraction: 0.1}
        deployments:
          - name: Model
            num_replicas: 2
            user_config: {threshold: 0.5}

`load_config` returns the request for DeployApplications. Every unknown key
and wrong type is a ConfigError naming the file and the path in it
(`app.yaml: applications[0].deployments[1].num_replicas: expected an integer,
got 'two'`); nothing is sent before the whole file is valid. `dump_config`
writes what was deployed back as the same YAML (`servefleet config`).

A file written for Ray Serve's `serve deploy` is read too: its keys that
servefleet lacks (servefleet/_private/configuration/ray_config.py), its deployment options
(servefleet/_private/configuration/ray_options.py), `runtime_env` for `runtime`, an application
without a name as "default" (Ray's default name), and import paths in Ray's
dotted form (`module.app`, `pkg.mod_pb2_grpc.add_XServicer_to_server`). What
is renamed or not used is said as one warning line each, through `warn`.

The keys, their types and bounds are tables (servefleet/_private/configuration/config_fields.py,
option_fields.py) that the file's JSON Schema is written from as well
(servefleet/_private/configuration/config_schema.py, `servefleet config schema`).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from typing import Any

import yaml

from servefleet._private.configuration import ray_config
from servefleet._private.configuration.config_fields import (
    APPLICATION,
    GRPC,
    HTTP,
    SHADOW,
    SPLIT_ENTRY,
    TOP,
    TRAFFIC,
)
from servefleet._private.configuration.field_table import Section, check_field
from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.option_notes import quiet_notes
from servefleet._private.configuration.options import (
    OptionError,
    check_bool,
    check_float,
    check_keys,
    check_mapping,
    check_str,
    to_json,
    to_override,
    to_runtime,
)
from servefleet._private.configuration.ray_options import normalize_options
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api

TOP_KEYS = TOP.keys
GRPC_KEYS = GRPC.keys
HTTP_KEYS = HTTP.keys
APP_KEYS = APPLICATION.keys
TRAFFIC_KEYS = TRAFFIC.keys
SHADOW_KEYS = SHADOW.keys
# Ray Serve's name for an application the file does not name.
DEFAULT_APP_NAME = "default"
# Keys that look right and are not, with what to write here instead.
HINTS = {"env_vars": "use env",
         "host": "set host and port under http_options (as Ray's multi-application "
                 "config requires too)",
         "port": "set host and port under http_options (as Ray's multi-application "
                 "config requires too)"}

Warn = Callable[[str], None]


class ConfigError(ValueError):
    """The config file is unreadable or breaks a rule; the message names where."""


class ConfigWarning(UserWarning):
    """A key that is accepted but renamed, or not used here (the message says why)."""


def _python_warning(message: str) -> None:
    warnings.warn(message, ConfigWarning, stacklevel=3)


def _keys(path: str, value: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key in value:
        if key in HINTS and key not in allowed:
            raise OptionError(f"{path}.{key}: unknown key ({HINTS[key]})")
    check_keys(path, value, allowed)


def _plain(path: str, value: dict[str, Any], section: Section, *names: str) -> dict[str, Any]:
    """The `names` that `value` has, each checked as `section` defines it."""
    return {name: check_field(f"{path}.{name}", section[name], value[name])
            for name in names if name in value}


def load_config(path: str, warn: Warn | None = None) -> api.DeployApplicationsRequest:
    """The request the file at `path` describes; ConfigError naming what is wrong.
    Each warning line (starting with `path`) goes to `warn`, only once the
    whole file is valid; default: a ConfigWarning."""
    lines: list[str] = []
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from None
    try:
        request = parse_config(data, os.path.dirname(os.path.abspath(path)), lines.append)
    except OptionError as e:
        raise ConfigError(f"{path}: {e}") from None
    for line in lines:
        (warn or _python_warning)(f"{path}: {line}")
    return request


def parse_config(data: Any, base_dir: str, warn: Warn | None = None
                 ) -> api.DeployApplicationsRequest:
    """The request a config describes; relative working dirs resolve from
    `base_dir`. Warning lines go to `warn` (default: a ConfigWarning)."""
    say = warn or _python_warning
    if data is None:
        data = {}
    data = check_mapping("(top level)", data)
    _keys("(top level)", data, TOP_KEYS)
    ray_config.read_top_level(data, say)
    request = api.DeployApplicationsRequest()
    if data.get("http_options") is not None:
        request.http_options.CopyFrom(_http_options(data["http_options"], say))
    apps = data.get("applications")
    if apps is None:
        raise OptionError("applications: required (a list of applications)")
    check_field("applications", TOP["applications"], apps)
    grpc = _grpc_options(data.get("grpc_options"), say)
    for i, app in enumerate(apps):
        spec = _application(f"applications[{i}]", app, base_dir, say)
        if not spec.grpc_servicer_functions:  # grpc_options' serve every application
            spec.grpc_servicer_functions.extend(grpc.get("grpc_servicer_functions", []))
        request.applications.append(spec)
    return request


def _servicer_functions(path: str, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise OptionError(f"{path}: expected a list of import paths "
                          "(module_pb2_grpc:add_XServicer_to_server)")
    # Ray's dotted form (pkg.mod_pb2_grpc.add_XServicer_to_server) too.
    return [colon_form(check_str(f"{path}[{i}]", v)) for i, v in enumerate(value)]


def _grpc_options(value: Any, say: Warn = lambda line: None) -> dict[str, Any]:
    """Ray Serve's grpc_options: the servicer functions (for every application
    that lists none itself) and where `servefleet up` serves gRPC."""
    if value is None:
        return {}
    value = check_mapping("grpc_options", value)
    _keys("grpc_options", value, GRPC_KEYS)
    ray_config.read_grpc_extras(value, say)
    out = _plain("grpc_options", value, GRPC, "host", "port")
    if value.get("grpc_servicer_functions") is not None:
        out["grpc_servicer_functions"] = _servicer_functions(
            "grpc_options.grpc_servicer_functions", value["grpc_servicer_functions"])
    return out


def grpc_listen_of(path: str) -> str | None:
    """HOST:PORT of the config's grpc_options (for `servefleet up`), or None."""
    try:
        with open(path) as f:
            data = yaml.safe_load(f) or {}
        grpc = _grpc_options(data.get("grpc_options") if isinstance(data, dict) else None)
    except (OSError, yaml.YAMLError, OptionError):
        return None  # load_config reports what is wrong with the file
    return f"{grpc.get('host', '127.0.0.1')}:{grpc['port']}" if "port" in grpc else None


def _http_options(value: Any, say: Warn) -> apb.HttpOptions:
    value = check_mapping("http_options", value)
    _keys("http_options", value, HTTP_KEYS)
    ray_config.read_http_extras(value, say)
    return apb.HttpOptions(**_plain("http_options", value, HTTP, *HTTP.names(is_ray=False)))


def _application(path: str, value: Any, base_dir: str, say: Warn) -> apb.ApplicationSpec:
    value = check_mapping(path, value)
    _keys(path, value, APP_KEYS)
    if "import_path" not in value:
        raise OptionError(f"{path}.import_path: required")
    import_path = colon_form(check_str(f"{path}.import_path", value["import_path"]))
    spec = apb.ApplicationSpec(name=check_str(f"{path}.name",
                                              value.get("name", DEFAULT_APP_NAME)),
                               import_path=import_path)
    runtime = ray_config.read_app_extras(path, value, say)
    if runtime is not None:
        spec.runtime.CopyFrom(_runtime(f"{path}.runtime_env", runtime, base_dir))
    if "route_prefix" in value:
        if value["route_prefix"] is None:
            spec.no_route = True
        else:
            spec.route_prefix = check_str(f"{path}.route_prefix", value["route_prefix"])
    if value.get("require_token") is not None:
        spec.require_token = check_bool(f"{path}.require_token", value["require_token"])
    if value.get("args") is not None:
        spec.args_json = to_json(f"{path}.args", check_mapping(f"{path}.args", value["args"]))
    if value.get("runtime") is not None:
        spec.runtime.CopyFrom(_runtime(f"{path}.runtime", value["runtime"], base_dir))
    deployments = check_field(f"{path}.deployments", APPLICATION["deployments"],
                              value.get("deployments")) or []
    for j, entry in enumerate(deployments):
        dpath = f"{path}.deployments[{j}]"
        entry = dict(check_mapping(dpath, entry))
        if "name" not in entry:
            raise OptionError(f"{dpath}.name: required")
        name = check_str(f"{dpath}.name", entry.pop("name"))
        entry = normalize_options(dpath, entry, ray_config.note_saying(say))
        if "route_prefix" in entry:
            del entry["route_prefix"]  # deprecated (said so above); the application's counts
        if entry.get("runtime") is not None:
            entry["runtime"] = _relative_runtime(f"{dpath}.runtime", entry["runtime"], base_dir)
        spec.deployments.append(to_override(dpath, entry, name, quiet_notes))
    if value.get("traffic") is not None:
        spec.traffic.CopyFrom(parse_traffic(f"{path}.traffic", value["traffic"]))
    if value.get("grpc_servicer_functions") is not None:
        spec.grpc_servicer_functions.extend(_servicer_functions(
            f"{path}.grpc_servicer_functions", value["grpc_servicer_functions"]))
    return spec


def _relative_runtime(path: str, value: Any, base_dir: str) -> dict[str, Any]:
    value = dict(check_mapping(path, value))
    if isinstance(value.get("working_dir"), str):
        value["working_dir"] = os.path.normpath(os.path.join(base_dir, value["working_dir"]))
    return value


def _runtime(path: str, value: Any, base_dir: str):
    return to_runtime(path, _relative_runtime(path, value, base_dir))


def parse_traffic(path: str, value: Any) -> apb.TrafficPolicy:
    """`split` as {deployment: weight} (or a list of {deployment, weight}), and `shadow`."""
    value = check_mapping(path, value)
    _keys(path, value, TRAFFIC_KEYS)
    out = apb.TrafficPolicy()
    split = value.get("split")
    if isinstance(split, dict):
        for name, weight in check_mapping(f"{path}.split", split).items():
            out.split.append(apb.WeightedDeployment(
                deployment=str(name), weight=check_float(f"{path}.split.{name}", weight)))
    elif isinstance(split, list):
        for i, entry in enumerate(split):
            entry = check_mapping(f"{path}.split[{i}]", entry)
            _keys(f"{path}.split[{i}]", entry, SPLIT_ENTRY.keys)
            out.split.append(apb.WeightedDeployment(
                deployment=check_str(f"{path}.split[{i}].deployment", entry.get("deployment")),
                weight=check_float(f"{path}.split[{i}].weight", entry.get("weight"))))
    elif split is not None:
        raise OptionError(f"{path}.split: expected a mapping of deployment to weight")
    if value.get("shadow") is not None:
        shadow = check_mapping(f"{path}.shadow", value["shadow"])
        _keys(f"{path}.shadow", shadow, SHADOW_KEYS)
        out.shadow.deployment = check_str(f"{path}.shadow.deployment", shadow.get("deployment"))
        out.shadow.fraction = check_float(f"{path}.shadow.fraction", shadow.get("fraction"))
    return out


def dump_config(reply: api.ListApplicationsResponse) -> str:
    """What was last deployed, as a config file."""
    data: dict[str, Any] = {}
    http = reply.http_options
    if http.ByteSize():
        data["http_options"] = {k: v for k, v in (
            ("host", http.host), ("port", http.port),
            ("request_timeout_s", http.request_timeout_s),
            ("max_request_body_bytes", http.max_request_body_bytes)) if v}
    data["applications"] = [_app_data(r.spec) for r in reply.applications]
    return yaml.safe_dump(data, sort_keys=False)


def _app_data(spec: apb.ApplicationSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"name": spec.name}
    if spec.no_route:
        out["route_prefix"] = None
    elif spec.HasField("route_prefix"):
        out["route_prefix"] = spec.route_prefix
    out["import_path"] = spec.import_path
    if spec.require_token:
        out["require_token"] = True
    if spec.grpc_servicer_functions:
        out["grpc_servicer_functions"] = list(spec.grpc_servicer_functions)
    if spec.args_json:
        out["args"] = json.loads(spec.args_json)
    if spec.runtime.ByteSize():
        out["runtime"] = _runtime_data(spec.runtime)
    if spec.deployments:
        out["deployments"] = [_override_data(o) for o in spec.deployments]
    if spec.traffic.ByteSize():
        traffic: dict[str, Any] = {}
        if spec.traffic.split:
            traffic["split"] = {t.deployment: t.weight for t in spec.traffic.split}
        if spec.traffic.HasField("shadow"):
            traffic["shadow"] = {"deployment": spec.traffic.shadow.deployment,
                                 "fraction": spec.traffic.shadow.fraction}
        out["traffic"] = traffic
    return out


def _runtime_data(runtime) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if runtime.working_dir:
        out["working_dir"] = runtime.working_dir
    if runtime.image:
        out["image"] = runtime.image
    if runtime.env:
        out["env"] = dict(runtime.env)
    if runtime.excludes:
        out["excludes"] = list(runtime.excludes)
    if runtime.HasField("placement"):
        out["placement"] = {k: list(getattr(runtime.placement, k))
                            for k in ("constraints", "spread") if getattr(runtime.placement, k)}
    return out


def _override_data(override: apb.DeploymentOverride) -> dict[str, Any]:
    out: dict[str, Any] = {"name": override.name}
    config = override.replica_config
    for field, value in config.ListFields():
        if field.name == "user_config_json":
            out["user_config"] = json.loads(value)
        elif field.name == "autoscaling_config":
            out["autoscaling_config"] = {f.name: v for f, v in value.ListFields()}
        elif field.name == "resources":  # custom: none a config can ask for
            out["resources"] = {f.name: v for f, v in value.ListFields() if f.name != "custom"}
        elif field.name == "request_router_kwargs_json":
            out["request_router_kwargs"] = json.loads(value)
        elif field.name == "retry_methods":
            out["retry_methods"] = list(value)
        else:
            out[field.name] = value
    if override.HasField("version"):
        out["version"] = override.version
    if override.runtime.ByteSize():
        out["runtime"] = _runtime_data(override.runtime)
    return out
