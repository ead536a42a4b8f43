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

Running an application under a name that already runs locally replaces it;
`serve.delete(name)` and `serve.shutdown()` stop local applications too.
Deployments are met and named as everywhere (applications/api.py's
GraphWalk): a deployment bound twice with different arguments gets `Name`,
`Name_1`, ...
"""

from __future__ import annotations

import logging
import threading

from servefleet._private.applications.api import Application, GraphWalk, replace_bound

from ._local_handle import REPLICAS, LocalDeploymentHandle
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


def _forget(name: str, app: tuple[str, list[LocalReplica]] | None) -> None:
    if app is None:
        return
    for replica in app[1]:
        REPLICAS.pop((name, replica.name), None)
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
