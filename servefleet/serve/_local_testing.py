"""`serve.run(app, _local_testing_mode=True)`: the application in this process.

As Ray's local testing mode: no controller, no proxy, no subprocess. Each
deployment of the graph is constructed here, once (one replica, whatever
num_replicas says), dependencies first, so a bound deployment among init
args arrives as a local handle to it; a constructor that raises makes
`serve.run` raise. `serve.run` returns the ingress's handle
(local_handle.py). What Ray's mode does not do, this does not either: no
HTTP (route_prefix is accepted and unused; call the ingress through its
handle), no autoscaling, no replica options (resources, runtime
environment). user_config is applied (`reconfigure`), as Ray does.

A deployment's deployment-scoped actors (`deployment_actors=`) are
constructed here too, before the deployment, each once, as a local
deployment of its own (`<deployment>-<actor>`: one version runs here)
that runs its calls one at a time for a plain class (Ray's actor default,
or actor_options' max_concurrency); `serve.get_deployment_actor(name)` in
the deployment's code is a local handle to it (_actors.py). Ray 2.60's
local testing mode starts no deployment actors (its get_deployment_actor
looks up a Ray actor nobody started, and fails); here the program runs as
it would on a cluster.

Running an application under a name that already runs locally replaces it;
`serve.delete(name)` and `serve.shutdown()` stop local applications too.
Deployments are met and named as everywhere (applications/api.py's
GraphWalk): a deployment bound twice with different arguments gets `Name`,
`Name_1`, ...
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from servefleet._private.applications.api import Application, GraphWalk, replace_bound
from servefleet._private.ray_actors import (
    actor_configs,
    actor_options,
    actor_target,
    deployment_name,
)

from ._local_handle import ACTORS, REPLICAS, LocalDeploymentHandle
from ._local_runtime import LocalReplica

logger = logging.getLogger(__name__)
_lock = threading.Lock()
# The local applications of this process: name -> (ingress, its replicas).
_apps: dict[str, tuple[str, list[LocalReplica]]] = {}


def run_local(app: Application, name: str) -> LocalDeploymentHandle:
    """Construct every deployment of `app` here; the ingress's handle."""
    replicas: list[LocalReplica] = []

    def handle_of(node: Application) -> LocalDeploymentHandle:
        return LocalDeploymentHandle(name, walk.name(node))

    def enter(node: Application, deployment_name: str) -> None:
        """Construct the deployment, its dependencies (met in its arguments) first."""
        args = tuple(replace_bound(a, handle_of) for a in node.args)
        kwargs = {k: replace_bound(v, handle_of) for k, v in node.kwargs.items()}
        options = node.deployment.options_dict
        if "num_gpus" in (options.get("ray_actor_options") or {}):
            logger.warning("%s asks for GPUs: local testing mode does not manage "
                           "CUDA_VISIBLE_DEVICES", deployment_name)
        if options.get("deployment_actors"):
            ACTORS[(name, deployment_name)] = _start_actors(
                name, deployment_name, options["deployment_actors"], replicas)
        replicas.append(LocalReplica(name, deployment_name, node.deployment.func_or_class,
                                     args, kwargs, options.get("user_config"),
                                     options.get("user_config") is not None))
        REPLICAS[(name, deployment_name)] = replicas[-1]

    walk = GraphWalk(enter)
    with _lock:
        old = _apps.pop(name, None)
        _forget(name, old)
        try:
            ingress = handle_of(app)
        except BaseException:
            _forget(name, ("", replicas))
            raise
        _apps[name] = (ingress.deployment, replicas)
    return ingress


def _start_actors(application: str, parent: str, configs: Any,
                  replicas: list[LocalReplica]) -> dict[str, str]:
    """Construct `parent`'s deployment-scoped actors, each a local deployment
    (appended to `replicas`); actor name -> that deployment's name."""
    where = f"deployment {parent}.deployment_actors"
    actors: dict[str, str] = {}
    for config in actor_configs(where, configs):
        hidden = deployment_name(parent, config["name"])
        concurrency = actor_options(where, config)["max_ongoing_requests"]
        replicas.append(LocalReplica(application, hidden, actor_target(config),
                                     config["init_args"], config["init_kwargs"],
                                     max_concurrency=concurrency))
        REPLICAS[(application, hidden)] = replicas[-1]
        actors[config["name"]] = hidden
    return actors


def _forget(name: str, app: tuple[str, list[LocalReplica]] | None) -> None:
    if app is None:
        return
    for replica in app[1]:
        REPLICAS.pop((name, replica.name), None)
        ACTORS.pop((name, replica.name), None)
        replica.stop()


def local_app_handle(name: str) -> LocalDeploymentHandle | None:
    """The ingress handle of local application `name`, or None."""
    app = _apps.get(name)
    return LocalDeploymentHandle(name, app[0]) if app is not None else None


def local_deployment_handle(deployment: str, app_name: str) -> LocalDeploymentHandle | None:
    if (app_name, deployment) in REPLICAS:
        return LocalDeploymentHandle(app_name, deployment)
    return None


def delete_local(name: str) -> bool:
    """Stop local application `name`; whether there was one."""
    with _lock:
        app = _apps.pop(name, None)
        _forget(name, app)
    return app is not None


def shutdown_local() -> None:
    with _lock:
        for name in list(_apps):
            _forget(name, _apps.pop(name))
