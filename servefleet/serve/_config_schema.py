"""Ray's config-file schema classes: ServeDeploySchema, ServeApplicationSchema,
DeploymentSchema (exported by schema.py).

Ray users build these to write or check a `serve deploy` file in code:

    config = ServeDeploySchema(applications=[ServeApplicationSchema(
        name="app", import_path="model:app",
        deployments=[DeploymentSchema(name="Model", num_replicas=2)])])
    yaml.safe_dump(config.dict(exclude_unset=True))

They take Ray's field names (dicts or the classes for nested entries) and
check what they are given the way servefleet reads a config file
(servefleet/_private/configuration/config_file.py), so an error names the same path `servefleet
deploy` would. A file is not deployed by building these: `servefleet
deploy FILE` (or DeployApplications) does that.
"""

from __future__ import annotations

import builtins
import os
from typing import Any, ClassVar

from ._options import OptionsModel

_DEPLOYMENT_FIELDS = ("name", "num_replicas", "route_prefix", "max_ongoing_requests",
                      "max_concurrent_queries", "max_queued_requests", "user_config",
                      "autoscaling_config", "graceful_shutdown_wait_loop_s",
                      "graceful_shutdown_timeout_s", "health_check_period_s",
                      "health_check_timeout_s", "ray_actor_options", "placement_group_bundles",
                      "placement_group_strategy", "max_replicas_per_node", "logging_config",
                      "request_router_config", "max_constructor_retry_count")


def check_route_prefix(owner: str, route_prefix: Any) -> None:
    """Ray's rules for a route prefix (None: no HTTP route): ValueError naming `owner`."""
    if route_prefix is None:
        return
    if not isinstance(route_prefix, str) or not route_prefix.startswith("/"):
        raise ValueError(f"{owner}: route_prefix must start with '/', got {route_prefix!r}")
    if route_prefix != "/" and route_prefix.endswith("/"):
        raise ValueError(f"{owner}: route_prefix must not end with '/' unless it is the "
                         f"root, got {route_prefix!r}")
    if "{" in route_prefix or "}" in route_prefix:
        raise ValueError(f"{owner}: route_prefix may not contain wildcards, got "
                         f"{route_prefix!r}")


def _dump(value: Any, exclude_unset: bool) -> Any:
    if isinstance(value, OptionsModel):
        return value.dict(exclude_unset=exclude_unset)
    if isinstance(value, list):
        return [_dump(v, exclude_unset) for v in value]
    return value


class _Nested(OptionsModel):
    """Nested schema objects dump as dicts."""

    def dict(self, *, exclude_unset: bool = False) -> builtins.dict[str, Any]:
        return {k: _dump(v, exclude_unset)
                for k, v in super().dict(exclude_unset=exclude_unset).items()}


class DeploymentSchema(_Nested):
    """One deployment's options in a config file (`name` is required)."""

    FIELDS: ClassVar[dict[str, Any]] = {name: None for name in _DEPLOYMENT_FIELDS}

    def _validate(self) -> None:
        from servefleet._private.configuration.options import to_override

        if not isinstance(self.name, str) or not self.name:
            raise ValueError("DeploymentSchema.name: required, a deployment name")
        options = {k: v for k, v in self.dict(exclude_unset=True).items()
                   if k not in ("name", "route_prefix")}
        to_override(f"deployment {self.name}", options)


class ServeApplicationSchema(_Nested):
    """One application of a config file (`import_path` is required)."""

    FIELDS: ClassVar[dict[str, Any]] = {
        "name": "default", "route_prefix": "/", "import_path": None, "runtime_env": {},
        "host": "0.0.0.0", "port": 8000, "deployments": [], "args": {},
        "logging_config": None, "external_scaler_enabled": False,
    }

    def _validate(self) -> None:
        if not isinstance(self.import_path, str) or not self.import_path:
            raise ValueError("ServeApplicationSchema.import_path: required, "
                             "'module:attribute' or Ray's 'module.attribute'")
        check_route_prefix("ServeApplicationSchema", self.route_prefix)
        if not isinstance(self.deployments, list):
            raise ValueError("ServeApplicationSchema.deployments: expected a list")
        object.__setattr__(self, "deployments", [DeploymentSchema.parse_obj(d)
                                                 for d in self.deployments])
        _check({"applications": [self.dict(exclude_unset=True) | {
            "import_path": self.import_path}]})


class ServeDeploySchema(_Nested):
    """A whole config file: cluster options and the applications."""

    FIELDS: ClassVar[dict[str, Any]] = {
        "proxy_location": "EveryNode", "http_options": {}, "grpc_options": {},
        "logging_config": None, "applications": [], "target_capacity": None,
    }

    def _validate(self) -> None:
        if not isinstance(self.applications, list):
            raise ValueError("ServeDeploySchema.applications: expected a list")
        object.__setattr__(self, "applications", [ServeApplicationSchema.parse_obj(a)
                                                  for a in self.applications])
        names = [a.name for a in self.applications]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"ServeDeploySchema.applications: the name {twice[0]!r} is "
                             "used twice")
        _check(self.dict(exclude_unset=True) | {"applications": [
            a.dict(exclude_unset=True) | {"import_path": a.import_path}
            for a in self.applications]})

    @staticmethod
    def get_empty_schema_dict() -> dict[str, Any]:
        return {"applications": []}


def _check(data: dict[str, Any]) -> None:
    """What servefleet deploy would say of `data` (a ValueError), quietly."""
    from servefleet._private.configuration.config_file import parse_config

    parse_config(data, os.getcwd(), warn=lambda line: None)
