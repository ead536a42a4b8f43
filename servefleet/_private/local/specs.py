"""The deployment specs of a local run: an application graph made into what
`servefleet.run` deploys (local.py does the deploying).

- Code travels by import path when it can be imported back (a module), by
  value otherwise (a script's or notebook's `__main__`: by_value.py), with
  init args as JSON when they are JSON, pickled otherwise.
- The working dir is the root the ingress's module was imported from: the
  script's directory for `__main__` (the package root under `python -m`),
  the current directory for a notebook. Modules the script imports from
  there are imported by the replicas too.
- The route, as Ray Serve 2.x's `serve.run` picks it: the `route_prefix`
  given to `run`; if none, the ingress deployment's own `route_prefix`
  option (None there: no HTTP route); if neither, "/". Only the ingress may
  set the option.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from servefleet._private.applications.api import (
    UNSET,
    Application,
    Deployment,
    GraphWalk,
    graph_of,
    replace_bound,
)
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb

DEFAULT_ROUTE_PREFIX = "/"


def working_dir(module_name: str) -> str:
    """The sys.path entry module `module_name` was imported from; for a
    `__main__` without a file (a notebook, `python -c`), the current directory."""
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        return os.getcwd()
    if module_name == "__main__":  # under `python -m pkg.mod`, pkg's parent is the root
        spec = getattr(module, "__spec__", None)
        module_name = getattr(spec, "name", None) or module_name
    path = Path(file).resolve().parent
    for _ in range(module_name.count(".") + file.endswith("__init__.py")):
        path = path.parent
    return str(path)


def route_of(app: Application, route_prefix: str | None) -> str | None:
    """The application's route (None: handles only); ValueError when a
    deployment other than the ingress sets route_prefix."""
    for node in _nodes(app)[1:]:
        if node.deployment.route_prefix not in (UNSET, None):
            raise ValueError(f"deployment {node.deployment.name} sets route_prefix "
                             f"{node.deployment.route_prefix!r}, but only the ingress "
                             f"deployment ({app.deployment.name}) is routed: set it there, "
                             "or pass route_prefix to run")
    if route_prefix is not None:
        return route_prefix
    own = app.deployment.route_prefix
    return DEFAULT_ROUTE_PREFIX if own is UNSET else own


def _nodes(app: Application) -> list[Application]:
    """Every bound deployment reachable from `app`, `app` first."""
    def enter(node: Application, name: str) -> None:
        for value in (*node.args, *node.kwargs.values()):
            replace_bound(value, walk.name)

    walk = GraphWalk(enter)
    walk.name(app)
    return walk.nodes


def application_specs(target: Application | Deployment, name: str,
                      route_prefix: str | None) -> list[dpb.DeploymentSpec]:
    """The validated specs of `target`'s deployments, ingress first.
    OptionError, ByValueError or ValueError for what cannot be deployed;
    InvalidArgument (controller/errors.py) naming the field for a bad spec."""
    from servefleet.controller.goals.app_specs import deployment_specs

    app = target.bind() if isinstance(target, Deployment) else target
    if not isinstance(app, Application):
        raise TypeError(f"servefleet.run needs a bound deployment (Deployment.bind(...)), "
                        f"got {target!r}")
    route = route_of(app, route_prefix)
    graph = graph_of(app, by_value=True)
    module = getattr(app.deployment.func_or_class, "__module__", None) or "__main__"
    spec = apb.ApplicationSpec(name=name, import_path=graph["deployments"][0]["import_path"],
                               runtime=dpb.RuntimeOptions(working_dir=working_dir(module)))
    if route is None:
        spec.no_route = True
    else:
        spec.route_prefix = route
    # Built without the pickles (the controller's own validation), which are
    # then laid on: they are opaque bytes, checked for size only.
    specs = deployment_specs(spec, graph)
    nodes = {node["name"]: node for node in graph["deployments"]}
    for out in specs:
        node = nodes[out.name]
        if node.get("by_value_target"):
            out.by_value.target = node["by_value_target"]
        if node.get("by_value_init_args"):
            out.by_value.init_args = node["by_value_init_args"]
            out.init_args_json = out.init_kwargs_json = ""
    return specs
