"""Ray Serve's functions: deployment, run, start, shutdown, delete, status,
get_app_handle, get_deployment_handle; same signatures and defaults as Ray
Serve 2.x, on servefleet.

`run` deploys on this process's embedded cluster (servefleet._private.local.embedded: a
controller and a proxy as child processes, started by the first `run` or by
`start`), or, with `_local_testing_mode=True` (or the environment variable
RAY_SERVE_FORCE_LOCAL_TESTING_MODE=1, as Ray reads it), in this process
(local_testing.py). The lookups (`status`, `get_app_handle`,
`get_deployment_handle`, `delete`) ask the cluster cluster.py finds, and
know this process's local-testing applications too.

`deployment` is servefleet's `@deployment` that also takes Ray's config
objects (`AutoscalingConfig(...)`, `LoggingConfig(...)`) where Ray takes
them, in the decorator and in `.options()`: they become the dicts
servefleet's options are (config.autoscaling_options).
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable
from typing import Any

from servefleet._private.applications import api as sf_api
from servefleet._private.handles import handle as sf_handle
from servefleet._private.local import embedded as local
from servefleet._private.ray_run_notes import note_run, note_start
from servefleet.client import ControllerClient

from ._cluster import (
    controllers,
    deployments_of,
    forget,
    ingress_of,
    remember_ingress,
    require_controllers,
)
from ._config_schema import check_route_prefix
from ._context import current_app_name
from ._local_testing import (
    delete_local,
    local_app_handle,
    local_deployment_handle,
    run_local,
    shutdown_local,
)
from ._options import OptionsModel
from ._status import fetch
from .config import AutoscalingConfig, HTTPOptions, ProxyLocation, autoscaling_options, gRPCOptions
from .exceptions import RayServeException
from .schema import LoggingConfig, ServeStatus

DEFAULT_APP_NAME = "default"
# How long delete(_blocking=True) waits for the application to be gone.
DELETE_TIMEOUT_S = 120.0
# Ray's serve.start() keywords of older releases, accepted and not used.
_OLD_START_KEYWORDS = ("detached", "dedicated_cpu", "_checkpoint_path",
                       "_override_controller_namespace")


class _RootDefault(str):
    """run()'s default route_prefix "/", told apart from "/" given explicitly
    (the ingress's @deployment(route_prefix=...) applies only to the default)."""


_ROOT = _RootDefault("/")


def _plain_options(options: dict[str, Any]) -> dict[str, Any]:
    """Ray's config objects among deployment options as plain dicts."""
    out = dict(options)
    for key, value in options.items():
        if isinstance(value, AutoscalingConfig):
            out[key] = autoscaling_options(value)
        elif isinstance(value, OptionsModel):
            out[key] = value.dict(exclude_unset=True)
    return out


class RayDeployment(sf_api.Deployment):
    """servefleet's Deployment whose options() also takes Ray's config objects."""

    def options(self, *, name: str | None = None, **options: Any) -> sf_api.Deployment:
        plain = super().options(name=name, **_plain_options(options))
        out = RayDeployment.__new__(RayDeployment)
        out.__dict__.update(plain.__dict__)
        return out


def deployment(_func_or_class: Callable[..., Any] | None = None, /, *, name: str | None = None,
               **options: Any) -> Any:
    """Make a class or function a deployment (Ray's `@serve.deployment`)."""
    plain = _plain_options(options)

    def wrap(target: Any) -> RayDeployment:
        made = sf_api.deployment(name=name, **plain)(target)
        out = RayDeployment.__new__(RayDeployment)
        out.__dict__.update(made.__dict__)
        return out

    if _func_or_class is not None:
        if not callable(_func_or_class):
            raise TypeError(f"@serve.deployment needs a class or a function, got "
                            f"{_func_or_class!r}")
        return wrap(_func_or_class)
    return wrap


def _check_run_args(target: Any, name: Any, route_prefix: Any, logging_config: Any) -> None:
    if not isinstance(target, sf_api.Application):
        hint = " (call .bind() on it)" if isinstance(target, sf_api.Deployment) else ""
        raise TypeError(f"serve.run expects an Application returned by Deployment.bind(), got "
                        f"{type(target).__name__}{hint}")
    if not isinstance(name, str) or not name:
        raise RayServeException(f"application name must be a non-empty string, got {name!r}")
    check_route_prefix("serve.run", route_prefix)
    if logging_config is not None and not isinstance(logging_config, LoggingConfig):
        LoggingConfig.parse_obj(logging_config)  # checks it


def run(target: sf_api.Application, blocking: bool = False, name: str = DEFAULT_APP_NAME,
        route_prefix: str | None = _ROOT, logging_config: dict | LoggingConfig | None = None,
        _local_testing_mode: bool = False) -> Any:
    """Run an application and return a handle to its ingress deployment; an
    application already running under `name` is replaced. `blocking` waits
    until Ctrl-C (then raises KeyboardInterrupt, as Ray does)."""
    _check_run_args(target, name, route_prefix, logging_config)
    note_run(logging_config)
    if os.environ.get("RAY_SERVE_FORCE_LOCAL_TESTING_MODE", "0") not in ("", "0"):
        _local_testing_mode = True
    if _local_testing_mode:
        handle: Any = run_local(target, name)
    else:
        delete_local(name)
        if route_prefix is None and target.deployment.route_prefix is not None:
            # servefleet.run reads None as "the ingress's own route_prefix
            # option, else /"; Ray's run(route_prefix=None) means no route.
            ingress = copy.copy(target.deployment)
            ingress.route_prefix = None
            target = sf_api.Application(ingress, target.args, target.kwargs)
        handle = local.run(target, name=name,
                           route_prefix=None if route_prefix is _ROOT else route_prefix)
        remember_ingress(name, handle.deployment)
    if blocking:
        while True:
            time.sleep(3600)
    return handle


def start(proxy_location: ProxyLocation | str | None = None,
          http_options: HTTPOptions | dict | None = None,
          grpc_options: gRPCOptions | dict | None = None,
          logging_config: LoggingConfig | dict | None = None, **kwargs: Any) -> None:
    """Start the embedded cluster with these HTTP options (host, port; port 0
    picks a free one); the first `run` otherwise starts it with Ray's defaults
    (127.0.0.1:8000). proxy_location, the gRPC and logging options and the
    other HTTP fields are checked, not applied (a warning line says so:
    ray_run_notes.py): the embedded cluster always runs one proxy (servefleet
    up serves gRPC, from a config file)."""
    unknown = [k for k in kwargs if k not in _OLD_START_KEYWORDS]
    if unknown:
        raise TypeError(f"serve.start() got an unexpected keyword argument {unknown[0]!r}")
    http = HTTPOptions.parse_obj(http_options) if http_options is not None else HTTPOptions()
    if grpc_options is not None:
        gRPCOptions.parse_obj(grpc_options)
    if logging_config is not None:
        LoggingConfig.parse_obj(logging_config)
    if proxy_location is not None:
        ProxyLocation(proxy_location)  # a bad name raises ValueError
    note_start(proxy_location, http.explicit(), grpc_options, logging_config, list(kwargs))
    local.start(http_host=http.host or local.DEFAULT_HTTP_HOST, http_port=http.port)


def shutdown() -> None:
    """Delete every application and stop the embedded cluster (and the
    local-testing applications of this process)."""
    shutdown_local()
    forget()
    local.shutdown()


def delete(name: str, _blocking: bool = True) -> None:
    """Delete application `name` and its deployments; with `_blocking`, wait
    until it is gone. Deleting an application that does not exist does nothing."""
    if delete_local(name):
        return
    addresses = controllers()
    if addresses is None:
        return
    forget(name)
    with ControllerClient(addresses, timeout=30) as client:
        names = deployments_of(client, name)
        if names is None:
            return
        client.delete_applications([name])
        if names:
            client.delete(names, application=name)
        deadline = time.monotonic() + DELETE_TIMEOUT_S
        while _blocking and deployments_of(client, name) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"serve.delete: application {name!r} was not gone after "
                                   f"{DELETE_TIMEOUT_S:g} s")
            time.sleep(0.1)


def status() -> ServeStatus:
    """The proxies and applications of the cluster (empty when none runs)."""
    addresses = controllers()
    if addresses is None:
        return ServeStatus()
    return fetch(addresses)


def get_app_handle(name: str) -> Any:
    """A handle to the ingress deployment of application `name`."""
    found = local_app_handle(name)
    if found is not None:
        return found
    addresses = require_controllers("serve.get_app_handle")
    with ControllerClient(addresses, timeout=30) as client:
        names = deployments_of(client, name)
        if not names:
            raise RayServeException(f"application {name!r} does not exist")
        ingress = ingress_of(client, name, names)
    if ingress is None:
        raise RayServeException(f"application {name!r}: its ingress deployment cannot be told "
                                f"apart among {', '.join(names)}; use "
                                "serve.get_deployment_handle(name, app_name=...)")
    return sf_handle.DeploymentHandle(ingress, name, addresses)


def get_deployment_handle(deployment_name: str, app_name: str | None = None,
                          _check_exists: bool = True, _record_telemetry: bool = True) -> Any:
    """A handle to deployment `deployment_name` of application `app_name`
    (inside a deployment's code, its own application by default)."""
    if app_name is None:
        app_name = current_app_name()
        if app_name is None:
            raise RayServeException("serve.get_deployment_handle: give app_name when calling "
                                    "from outside a deployment's code")
    found = local_deployment_handle(deployment_name, app_name)
    if found is not None:
        return found
    addresses = require_controllers("serve.get_deployment_handle")
    # Inside a replica the call would block the replica's loop: no check there.
    if _check_exists and current_app_name() is None:
        with ControllerClient(addresses, timeout=30) as client:
            names = deployments_of(client, app_name)
        if names is None or deployment_name not in names:
            raise RayServeException(f"deployment {deployment_name!r} of application "
                                    f"{app_name!r} does not exist")
    return sf_handle.DeploymentHandle(deployment_name, app_name, addresses)
