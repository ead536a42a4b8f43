"""The Python API: `@deployment`, `.options()`, `.bind()`, and the graph it builds.

    from servefleet import deployment

    @deployment(num_replicas=2, user_config={"threshold": 0.5})
    class Model:
        def __init__(self, adder): ...
        async def __call__(self, request): ...

    app = Model.bind(Adder.bind(10))

A bound deployment (`Application`) passed as an argument to another one
becomes, in the replica, a `DeploymentHandle` to it (servefleet/_private/handles/handle.py).
Deployed from a config file or the CLI, arguments travel as JSON, so they
must be JSON values, bound deployments, or lists and dicts of those. A local
run (`servefleet.run`) may send more by value (servefleet/_private/applications/by_value.py): a
class or function defined in a script or notebook, and init args of any
Python type.

`graph_of(app)` walks an application from its ingress and returns the plain
data the build step reports to the controller (servefleet/_private/applications/build.py): per
deployment its name, import path, init args (bound deployments replaced by
handle markers) and options as given in code. `graph_of(app, by_value=True)`
adds the pickles of a local run.

`route_prefix` is accepted as a `@deployment` option, as Ray Serve 2.x still
accepts it (deprecated there): it is the route of an application whose
ingress it is, when `run` is given none; it is not a deployment option the
controller knows, so it stays out of `options_dict`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, overload

from servefleet._private.actor_env import ACTOR_OF_ENV
from servefleet._private.applications.by_value import (
    check_size,
    dumps_init,
    dumps_target,
    is_by_value,
)
from servefleet._private.configuration.option_notes import quiet_notes
from servefleet._private.configuration.options import OptionError, to_json, to_override
from servefleet._private.configuration.ray_options import merge_options, normalize_options
from servefleet._private.ray_actors import (
    ACTORS_ENV,
    actor_configs,
    actor_env,
    actor_options,
    actor_target,
    code_version,
    deployment_name,
)

# A JSON object standing for a handle in init args and handle-call arguments.
HANDLE_MARKER = "__servefleet_handle__"
ROUTE_PREFIX = "route_prefix"
# A deployment's route_prefix when its options do not set one.
UNSET: Any = type("Unset", (), {"__repr__": lambda self: "UNSET"})()


class Deployment:
    """A class or function with its deployment options; `.bind()` makes an application."""

    def __init__(self, target: Any, name: str, options: dict[str, Any]) -> None:
        options = dict(options)
        route = options.pop(ROUTE_PREFIX, UNSET)
        if route is not UNSET and route is not None and (
                not isinstance(route, str) or not route.startswith("/")):
            raise OptionError(f"deployment {name}: route_prefix must be a path starting with "
                              f"'/', or None for no HTTP route, got {route!r}")
        actors = options.get("deployment_actors")
        if actors is not None:  # Ray's deployment-scoped actors (ray_actors.py)
            actor_configs(f"deployment {name}.deployment_actors", actors)
        # Raises on a bad option now, in code.
        to_override(f"deployment {name}", {k: v for k, v in options.items()
                                            if k != "deployment_actors"})
        self.func_or_class = target
        self.name = name
        self._options = options
        # Ray's deprecated @deployment(route_prefix=...): UNSET, a path, or None.
        self.route_prefix: str | None = route

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
        mine = {**self._options} if self.route_prefix is UNSET else \
            {**self._options, ROUTE_PREFIX: self.route_prefix}
        # As Ray's: a key wins under its old or new name, and a replica count
        # and an autoscaling_config replace each other.
        return Deployment(self.func_or_class, name or self.name, merge_options(mine, options))

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
    first hangs; default ["GET", "HEAD"]), request_router and
    request_router_kwargs (how callers choose a replica: docs/routing.md).
    An unknown option or a wrong type raises OptionError at once.
    """
    def wrap(target: Any) -> Deployment:
        if not (inspect.isclass(target) or callable(target)):
            raise TypeError(f"@deployment needs a class or a function, got {target!r}")
        return Deployment(target, name or target.__name__, options)

    if _target is not None:
        return wrap(_target)
    return wrap


def graph_of(app: Application | Deployment, by_value: bool = False) -> dict[str, Any]:
    """The application's deployments as plain data, ingress first.

    A deployment bound more than once with different arguments gets names
    `Name`, `Name_1`, ... in the order met; the same bound object met again is
    the same deployment.

    With `by_value` (a local run), a deployment whose class or function cannot
    be imported back (defined in `__main__`) gets `by_value_target`, its
    pickle, and one with such a target or with init args that are not JSON
    gets `by_value_init_args` instead of JSON ones (by_value.py); ByValueError
    when they cannot be pickled or are too large.
    """
    if isinstance(app, Deployment):
        app = app.bind()
    if not isinstance(app, Application):
        raise TypeError(f"expected a bound deployment (Deployment.bind(...)), got {app!r}")
    nodes: list[dict[str, Any]] = []

    def enter(node: Application, name: str) -> None:
        entry: dict[str, Any] = {"name": name, "import_path": node.deployment.import_path,
                                 "options": node.deployment.options_dict}
        nodes.append(entry)
        if by_value:
            _add_by_value(entry, node, walk.name)
        else:
            _add_json_args(entry, node, walk.name)
        actors = entry["options"].pop("deployment_actors", None)
        if actors:  # each a hidden deployment of one replica, per version (ray_actors.py)
            configs = actor_configs(f"deployment {name}.deployment_actors", actors)
            version = code_version({k: entry.get(k) for k in _CODE_FIELDS}, entry["options"],
                                   configs)
            entry["actors"] = {}
            for config in configs:
                hidden = walk.name(_actor_node(name, config, version))
                entry["actors"][config["name"]] = hidden
                actor_of[hidden] = name

    walk = GraphWalk(enter)
    actor_of: dict[str, str] = {}  # hidden deployment -> the deployment it serves
    ingress = walk.name(app)
    for entry in nodes:  # servefleet's names, as JSON: they travel to the controller
        # (Ray's config objects become dicts; the user was warned at @deployment).
        entry["options"] = normalize_options(f"deployment {entry['name']} options",
                                             entry["options"], quiet_notes)
        actors = entry.pop("actors", None)
        env = {ACTORS_ENV: actor_env(actors)} if actors else {}  # part of the replicas' code
        if entry["name"] in actor_of:  # whose actor it is (the controller's to know)
            env[ACTOR_OF_ENV] = actor_of[entry["name"]]
        if env:
            runtime = entry["options"]["runtime"] = dict(entry["options"].get("runtime") or {})
            runtime["env"] = {**(runtime.get("env") or {}), **env}
        to_json(f"deployment {entry['name']} options", entry["options"])
    return {"ingress": ingress, "deployments": nodes}


# What of a graph entry defines its replicas' code (for actors' versions).
_CODE_FIELDS = ("import_path", "init_args", "init_kwargs", "by_value_target",
                "by_value_init_args")


def _actor_node(parent: str, config: dict[str, Any], version: str) -> Application:
    """A deployment-scoped actor as a bound deployment of one replica."""
    hidden = Deployment(actor_target(config), deployment_name(parent, config["name"], version),
                        actor_options(f"deployment {parent}.deployment_actors", config))
    return hidden.bind(*config["init_args"], **config["init_kwargs"])


class GraphWalk:
    """The one walk of an application graph, shared by everything that reads
    one (graph_of, local testing mode, a local run's checks): each bound
    deployment is named once, in the order met from the ingress, and
    `enter(node, name)` is called then, before the nodes among its arguments
    (which `enter` meets through `name`).

    A deployment bound more than once with different arguments gets names
    `Name`, `Name_1`, ...; the same bound object met again is the same
    deployment, under the name it got first.
    """

    def __init__(self, enter: Callable[[Application, str], object]) -> None:
        self._enter = enter
        self._names: dict[int, str] = {}
        self._taken: set[str] = set()
        # Every node met, kept alive so that an id() in `_names` is never reused
        # by a temporary (an unbound Deployment among arguments is bound on meeting).
        self.nodes: list[Application] = []

    def name(self, node: Application) -> str:
        """`node`'s name in the graph, entering it the first time it is met."""
        if id(node) in self._names:
            return self._names[id(node)]
        base = node.deployment.name
        name, n = base, 0
        while name in self._taken:
            n += 1
            name = f"{base}_{n}"
        self._taken.add(name)
        self._names[id(node)] = name
        self.nodes.append(node)
        self._enter(node, name)
        return name


def replace_bound(value: Any, replace: Callable[[Application], Any]) -> Any:
    """`value` with each bound deployment in it, also inside lists, tuples,
    sets and dicts, replaced by `replace(node)`; a Deployment passed unbound
    counts as bound without arguments. Anything else is kept as it is."""
    if isinstance(value, Deployment):
        value = value.bind()
    if isinstance(value, Application):
        return replace(value)
    if isinstance(value, list | tuple | set | frozenset):
        return type(value)(replace_bound(v, replace) for v in value)
    if isinstance(value, dict):
        return {k: replace_bound(v, replace) for k, v in value.items()}
    return value


def _add_json_args(entry: dict[str, Any], node: Application,
                   visit: Callable[[Application], str]) -> None:
    name = entry["name"]
    entry["init_args"] = [encode(a, visit, f"{name} argument {i}")
                          for i, a in enumerate(node.args)]
    entry["init_kwargs"] = {k: encode(v, visit, f"{name} argument {k!r}")
                            for k, v in node.kwargs.items()}


def _add_by_value(entry: dict[str, Any], node: Application,
                  visit: Callable[[Application], str]) -> None:
    """A local run's node: its target pickled if it must be, and its init
    args as JSON when they are and the target is imported, else pickled."""
    what = f"deployment {entry['name']}"
    target = node.deployment.func_or_class
    code = b""
    if is_by_value(target):
        code = dumps_target(target, what)
        entry["by_value_target"] = code
        entry["import_path"] = f"__main__:{_identifier(getattr(target, '__name__', ''))}"
    else:
        try:
            _add_json_args(entry, node, visit)
            return
        except OptionError:
            pass  # not JSON: pickled below

    def marker(obj: Any) -> dict[str, Any] | None:
        if isinstance(obj, Application):
            return {"deployment": visit(obj)}
        if isinstance(obj, Deployment):
            return {"deployment": visit(obj.bind())}
        handle = getattr(type(obj), "_servefleet_marker", None)
        return handle(obj)[HANDLE_MARKER] if handle is not None else None

    init = dumps_init(node.args, node.kwargs, marker, what)
    check_size(code, init, what)
    entry["by_value_init_args"] = init
    entry["init_args"], entry["init_kwargs"] = [], {}


def _identifier(name: str) -> str:
    """`name` if it can stand after the colon of an import path, else a stand-in."""
    return name if name.isidentifier() else "deployment"


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
