"""The Python API: `@deployment`, `.options()`, `.bind()`, and the graph it builds.

    from servefleet import deployment

    @deployment(num_replicas=2, user_config={"threshold": 0.5})
    class Model:
        def __init__(self, adder): ...
        async def __call__(self, request): ...

    app = Model.bind(Adder.bind(10))

A bound deployment (`Application`) passed as an argument to another one
becomes, in the replica, a `DeploymentHandle` to it (servefleet/handle.py).
Arguments travel as JSON, so they must be JSON values, bound deployments, or
lists and dicts of those; nothing is pickled.

`graph_of(app)` walks an application from its ingress and returns the plain
data the build step reports to the controller (servefleet/build.py): per
deployment its name, import path, init args (bound deployments replaced by
handle markers) and options as given in code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, overload

from .options import OptionError, to_json, to_override

# A JSON object standing for a handle in init args and handle-call arguments.
HANDLE_MARKER = "__servefleet_handle__"


class Deployment:
    """A class or function with its deployment options; `.bind()` makes an application."""

    def __init__(self, target: Any, name: str, options: dict[str, Any]) -> None:
        to_override(f"deployment {name}", options)  # raises on a bad option now, in code
        self.func_or_class = target
        self.name = name
        self._options = dict(options)

    @property
    def import_path(self) -> str:
        """Where a replica imports it from: the module and name it was defined with."""
        target = self.func_or_class
        return f"{target.__module__}:{target.__qualname__}"

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self._options)

    def options(self, *, name: str | None = None, **options: Any) -> Deployment:
        """A copy with some options replaced (`name` renames it)."""
        return Deployment(self.func_or_class, name or self.name, {**self._options, **options})

    def bind(self, *args: Any, **kwargs: Any) -> Application:
        return Application(self, args, kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"deployment {self.name} cannot be called directly: use "
                        f"{self.name}.bind(...) to build an application, and a handle to "
                        "call it")

    def __repr__(self) -> str:
        return f"Deployment({self.name!r}, {self.import_path!r})"


class Application:
    """A deployment bound to its init args: the node of an application graph."""

    def __init__(self, deployment: Deployment, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.deployment = deployment
        self.args = args
        self.kwargs = kwargs


@overload
def deployment(_target: Callable[..., Any], /) -> Deployment: ...


@overload
def deployment(_target: None = None, /, *, name: str | None = None,
               **options: Any) -> Callable[[Callable[..., Any]], Deployment]: ...


def deployment(_target: Any = None, /, *, name: str | None = None,
               **options: Any) -> Any:
    """Make a class or function a deployment, with or without options:

        @deployment
        @deployment(num_replicas=3, max_ongoing_requests=10)

    Options: num_replicas, max_ongoing_requests, max_queued_requests,
    user_config, autoscaling_config, health_check_period_s,
    health_check_timeout_s, startup_timeout_s, graceful_shutdown_timeout_s,
    graceful_shutdown_wait_loop_s, version, runtime ({"working_dir", "env"}),
    retry_methods (HTTP methods safe to send to a second replica when the
    first hangs; default ["GET", "HEAD"]).
    An unknown option or a wrong type raises OptionError at once.
    """
    def wrap(target: Any) -> Deployment:
        if not (inspect.isclass(target) or callable(target)):
            raise TypeError(f"@deployment needs a class or a function, got {target!r}")
        return Deployment(target, name or target.__name__, options)

    if _target is not None:
        return wrap(_target)
    return wrap


def graph_of(app: Application | Deployment) -> dict[str, Any]:
    """The application's deployments as plain data, ingress first.

    A deployment bound more than once with different arguments gets names
    `Name`, `Name_1`, ... in the order met; the same bound object met again is
    the same deployment.
    """
    if isinstance(app, Deployment):
        app = app.bind()
    if not isinstance(app, Application):
        raise TypeError(f"expected a bound deployment (Deployment.bind(...)), got {app!r}")
    names: dict[int, str] = {}
    # Keeps every node visited alive, so that an id() in `names` is never reused
    # by a temporary (an unbound Deployment passed as an argument is bound here).
    visited: list[Application] = []
    taken: set[str] = set()
    nodes: list[dict[str, Any]] = []

    def visit(node: Application) -> str:
        if id(node) in names:
            return names[id(node)]
        base = node.deployment.name
        name, n = base, 0
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        names[id(node)] = name
        visited.append(node)
        entry: dict[str, Any] = {"name": name, "import_path": node.deployment.import_path,
                                 "options": node.deployment.options_dict}
        nodes.append(entry)
        entry["init_args"] = [encode(a, visit, f"{name} argument {i}")
                              for i, a in enumerate(node.args)]
        entry["init_kwargs"] = {k: encode(v, visit, f"{name} argument {k!r}")
                                for k, v in node.kwargs.items()}
        return name

    ingress = visit(app)
    for entry in nodes:  # the options must be JSON too: they travel to the controller
        to_json(f"deployment {entry['name']} options", entry["options"])
    return {"ingress": ingress, "deployments": nodes}


def encode(value: Any, bound: Callable[[Application], str], path: str) -> Any:
    """`value` as JSON data, with bound deployments (via `bound`) as handle markers."""
    if isinstance(value, Application):
        return {HANDLE_MARKER: {"deployment": bound(value)}}
    if isinstance(value, Deployment):
        return {HANDLE_MARKER: {"deployment": bound(value.bind())}}
    if isinstance(value, list | tuple):
        return [encode(v, bound, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise OptionError(f"{path}: dict keys must be strings to travel as JSON")
            out[k] = encode(v, bound, f"{path}[{k!r}]")
        return out
    if value is None or isinstance(value, str | int | float | bool):
        return value
    handle = getattr(value, "_servefleet_marker", None)
    if handle is not None:  # a DeploymentHandle passed along
        return handle()
    raise OptionError(f"{path}: {type(value).__name__} cannot travel as JSON; pass JSON "
                      "values, bound deployments or handles")
