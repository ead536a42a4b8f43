"""Applications: validating their specs, and turning a built graph into deployments.

Pure functions. `normalize_application` checks an ApplicationSpec the way
spec.py checks a DeploymentSpec: the first broken rule raises
InvalidArgument with the field path (`applications[1].import_path: ...`).

`deployment_specs` combines the graph the build step reported (the
deployments and their options in code) with the spec's overrides, in Ray
Serve's order of precedence: config file > code > defaults. Layering uses
`overlay`: a field set in a later layer wins and an unset one leaves the
earlier value; a list set in a later layer replaces the earlier list (protobuf's
MergeFrom would append to it), and maps merge key by key. Runtime options
layer the same way: application, then the deployment's own in code, then the
file's override of it.
"""

from __future__ import annotations

import json
import math
from typing import Any

from google.protobuf.message import Message

from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.option_notes import quiet_notes
from servefleet._private.configuration.options import OptionError, to_override
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as dpb

from ..errors import InvalidArgument
from .grpc_fields import IMPORT_PATH_RE, check_grpc
from .spec import canonical_json, check_name, normalize_spec

DEFAULT_ROUTE_PREFIX = "/"
# One application is applied in one transaction: its deployments and its record
# (deployments.MAX_OPS_PER_TXN, 100, under etcd's 128 operations).
MAX_DEPLOYMENTS_PER_APPLICATION = 99


def route_of(spec: apb.ApplicationSpec) -> str | None:
    if spec.no_route:
        return None
    return spec.route_prefix if spec.HasField("route_prefix") else DEFAULT_ROUTE_PREFIX


def normalize_application(spec: apb.ApplicationSpec, field: str) -> apb.ApplicationSpec:
    """The validated form of `spec` (a new message), with canonical JSON."""
    out = apb.ApplicationSpec()
    out.CopyFrom(spec)
    check_name(f"{field}.name", out.name)
    # Ray Serve's dotted import paths (module.app, pkg.mod_pb2_grpc.add_XServicer_to_server)
    # in servefleet's form, before any check splits them at the colon.
    out.import_path = colon_form(out.import_path)
    functions = [colon_form(path) for path in out.grpc_servicer_functions]
    del out.grpc_servicer_functions[:]
    out.grpc_servicer_functions.extend(functions)
    if not IMPORT_PATH_RE.fullmatch(out.import_path):
        raise InvalidArgument(f"{field}.import_path",
                              f"must look like 'package.module:attribute', got {out.import_path!r}")
    out.args_json = canonical_json(f"{field}.args_json", out.args_json, dict)
    if out.no_route and out.HasField("route_prefix"):
        raise InvalidArgument(f"{field}.route_prefix", "must be unset when no_route is true")
    # Route and runtime rules are the deployment's: check them on a stand-in.
    probe = dpb.DeploymentSpec(name="probe", import_path="m:a", runtime=out.runtime)
    route = route_of(out)
    if route is not None:
        probe.route_prefix = route
    try:
        normalize_spec(probe)
    except InvalidArgument as e:
        raise InvalidArgument(field + e.field.removeprefix("spec"), e.rule) from None
    seen: set[str] = set()
    for i, override in enumerate(out.deployments):
        check_name(f"{field}.deployments[{i}].name", override.name)
        # Check the values now, on a stand-in: a bad one must not wait for the build.
        probe = dpb.DeploymentSpec(name=override.name, import_path="m:a",
                                   replica_config=override.replica_config,
                                   runtime=override.runtime,
                                   version=override.version if override.HasField("version")
                                   else "")
        try:
            normalize_spec(probe)
        except InvalidArgument as e:
            raise InvalidArgument(f"{field}.deployments[{i}]" + e.field.removeprefix("spec"),
                                  e.rule) from None
        if override.name in seen:
            raise InvalidArgument(f"{field}.deployments[{i}].name",
                                  f"{override.name!r} is listed twice")
        seen.add(override.name)
    check_traffic(f"{field}.traffic", out.traffic)
    check_grpc(field, out.grpc_servicer_functions)
    return out


def check_traffic(field: str, traffic: apb.TrafficPolicy) -> None:
    for i, target in enumerate(traffic.split):
        check_name(f"{field}.split[{i}].deployment", target.deployment)
        if not math.isfinite(target.weight) or target.weight < 0:
            raise InvalidArgument(f"{field}.split[{i}].weight",
                                  f"must be a number >= 0, got {target.weight!r}")
    if traffic.split and sum(t.weight for t in traffic.split) <= 0:
        raise InvalidArgument(f"{field}.split", "the weights must not all be 0")
    if traffic.HasField("shadow"):
        check_name(f"{field}.shadow.deployment", traffic.shadow.deployment)
        if not 0 <= traffic.shadow.fraction <= 1:
            raise InvalidArgument(f"{field}.shadow.fraction",
                                  f"must be between 0 and 1, got {traffic.shadow.fraction!r}")


def check_traffic_targets(spec: apb.ApplicationSpec, names: list[str]) -> None:
    """Every deployment the traffic policy names is one the application has."""
    known = set(names)
    targets = [t.deployment for t in spec.traffic.split]
    if spec.traffic.HasField("shadow"):
        targets.append(spec.traffic.shadow.deployment)
    for name in targets:
        if name not in known:
            raise InvalidArgument("traffic", f"application {spec.name} has no deployment "
                                             f"{name!r} (it has {', '.join(names)})")


def overlay(target: Message, layer: Message) -> None:
    """Lay `layer` over `target`: the fields set in it win, its lists replace
    the target's, its maps merge into the target's key by key."""
    for field, value in layer.ListFields():
        mine = getattr(target, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            mine.MergeFrom(value)
        elif field.is_repeated:
            target.ClearField(field.name)
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            mine.SetInParent()
            overlay(mine, value)
        else:
            setattr(target, field.name, value)


def deployment_specs(spec: apb.ApplicationSpec, graph: dict[str, Any]
                     ) -> list[dpb.DeploymentSpec]:
    """The application's deployments, ingress first; InvalidArgument if they cannot be."""
    nodes = graph.get("deployments") or []
    if len(nodes) > MAX_DEPLOYMENTS_PER_APPLICATION:
        raise InvalidArgument("deployments", f"an application has at most "
                              f"{MAX_DEPLOYMENTS_PER_APPLICATION} deployments, got {len(nodes)}")
    names = [node["name"] for node in nodes]
    overrides = {o.name: o for o in spec.deployments}
    for name in overrides:
        if name not in names:
            raise InvalidArgument("deployments", f"the config overrides deployment {name!r}, "
                                  f"but the application has only {', '.join(names)}")
    check_traffic_targets(spec, names)
    out = []
    for node in nodes:
        name = node["name"]
        try:
            # The SDK spoke of renamed and unused options where the user wrote them.
            code = to_override(f"deployment {name} (in code)", node.get("options") or {}, name,
                               quiet_notes)
        except OptionError as e:
            raise InvalidArgument("deployments", str(e)) from None
        layers = [code] + ([overrides[name]] if name in overrides else [])
        deployment = dpb.DeploymentSpec(
            name=name, application=spec.name, import_path=node["import_path"],
            init_args_json=json.dumps(node.get("init_args") or []),
            init_kwargs_json=json.dumps(node.get("init_kwargs") or {}))
        deployment.runtime.CopyFrom(spec.runtime)
        for layer in layers:
            # num_replicas and autoscaling_config exclude each other: the layer
            # that sets one replaces the other from the layers below it.
            if layer.replica_config.HasField("num_replicas"):
                deployment.replica_config.ClearField("autoscaling_config")
            if layer.replica_config.HasField("autoscaling_config"):
                deployment.replica_config.ClearField("num_replicas")
            overlay(deployment.replica_config, layer.replica_config)
            overlay(deployment.runtime, layer.runtime)
            if layer.HasField("version"):
                deployment.version = layer.version
        route = route_of(spec)
        split = {t.deployment for t in spec.traffic.split}
        if name == graph.get("ingress") or name in split:
            if route is not None and name == graph.get("ingress"):
                deployment.route_prefix = route
            # The application's gRPC services are the ingress deployment's, and
            # those of the deployments a traffic split sends its calls to.
            deployment.grpc_servicer_functions.extend(spec.grpc_servicer_functions)
            deployment.grpc_services.extend(graph.get("grpc_services") or [])
            deployment.grpc_streaming_methods.extend(graph.get("grpc_streaming_methods") or [])
            deployment.grpc_client_streaming_methods.extend(
                graph.get("grpc_client_streaming_methods") or [])
        try:
            out.append(normalize_spec(deployment))
        except InvalidArgument as e:
            raise InvalidArgument(f"deployments[{name}]" + e.field.removeprefix("spec"),
                                  e.rule) from None
    return out


def check_http_options(options: apb.HttpOptions) -> None:
    if options.port > 65535:
        raise InvalidArgument("http_options.port", f"must be at most 65535, got {options.port}")
    if not math.isfinite(options.request_timeout_s) or options.request_timeout_s < 0:
        raise InvalidArgument("http_options.request_timeout_s",
                              f"must be >= 0 seconds, got {options.request_timeout_s!r}")
    if options.max_request_body_bytes > 1 << 50:
        raise InvalidArgument("http_options.max_request_body_bytes",
                              f"must be at most {1 << 50}, got {options.max_request_body_bytes}")


# One DeployApplications reads at most this many working dirs (each with its
# excludes): a config file names a handful; hashing is the costly part.
MAX_WORKING_DIRS_PER_REQUEST = 32
MAX_APPLICATIONS_PER_REQUEST = 100  # deployments.MAX_OPS_PER_TXN: one transaction


def check_request_bounds(request: api.DeployApplicationsRequest) -> None:
    """The cheap checks of a DeployApplications, made before anything is copied,
    read from disk or hashed: how many applications, deployments per
    application and distinct working dirs. InvalidArgument naming the field."""
    apps = request.applications
    if len(apps) > MAX_APPLICATIONS_PER_REQUEST:
        raise InvalidArgument("applications", f"at most {MAX_APPLICATIONS_PER_REQUEST} in one "
                              f"request, got {len(apps)}")
    trees = set()
    for i, app in enumerate(apps):
        if len(app.deployments) > MAX_DEPLOYMENTS_PER_APPLICATION:
            raise InvalidArgument(f"applications[{i}].deployments",
                                  f"at most {MAX_DEPLOYMENTS_PER_APPLICATION}, "
                                  f"got {len(app.deployments)}")
        for runtime in [app.runtime, *(o.runtime for o in app.deployments)]:
            if runtime.working_dir:
                trees.add((runtime.working_dir, tuple(runtime.excludes)))
        if len(trees) > MAX_WORKING_DIRS_PER_REQUEST:
            raise InvalidArgument(f"applications[{i}].runtime.working_dir",
                                  f"one request may name at most "
                                  f"{MAX_WORKING_DIRS_PER_REQUEST} different working dirs "
                                  "(with their excludes)")
