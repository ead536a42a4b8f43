"""Ray Serve's deployment-scoped actors (`deployment_actors=` and
`serve.get_deployment_actor`), built on what servefleet has: each actor is a
hidden deployment of one replica in the same application, named after its
parent (`<parent>-<actor name>`), and `get_deployment_actor(name)` in a
replica of the parent is a handle to it. So the actor is one stateful object
every replica of its deployment calls (`await actor.method.remote(...)`);
the controller keeps it running (health checks, a replacement if it dies,
adopted after a failover) for as long as the application lives, and deletes
it with the application.

What becomes of `DeploymentActorConfig`'s fields:

- `actor_class` (the class, or its import path) and `init_args` /
  `init_kwargs`: the hidden deployment's code and init args, sent as a
  deployment's are (by value from a script);
- `actor_options`: `max_concurrency` is the deployment's
  max_ongoing_requests, by Ray's defaults when unset (1: calls one at a
  time, as a threaded actor runs them; 1000 for a class with async
  methods); `num_cpus`, `num_gpus`, `memory`, `resources`,
  `accelerator_type` and `runtime_env` are the hidden deployment's
  `ray_actor_options`, used or noted as a deployment's are; any other key
  is noted and not used.

Actors are per version of the parent's code, as Ray keys them by code
version: the hidden deployment's name ends in `code_version`, a digest of
what defines the parent's replicas as the deploying program sees it (its
class or function, init args, runtime and `version` option) and of its
actors' configs; its replica count, user_config and the other options do
not count, so a scale-up or a new user_config keeps the actors. A new
version of the parent thus gets new actors, started as its replicas are,
while the old version's replicas (running or draining) keep calling theirs;
the controller deletes an old version's actors once none of the parent's
replicas of another version than its current one is left
(controller/reconcile/actor_retirement.py).

The parent's replicas learn their actors' deployments from the environment
variable ACTORS_ENV (actor_env.py), part of the parent's code, so a new
set of actors rolls its replicas, as in Ray; each actor's deployment names
its parent in ACTOR_OF_ENV. Differences from Ray: a change of files under
the working_dir alone (the same import path and arguments) rolls the
parent's replicas but keeps its actors (set a new `version` for new ones);
an actor's state is not kept when it is replaced; and the actor is listed
among the application's deployments in `serve.status()`.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import re
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

from servefleet._private.actor_env import ACTORS_ENV, actors_env, actors_of
from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.option_checks import (
    OptionError,
    check_mapping,
    check_str,
    type_name,
)
from servefleet._private.configuration.option_notes import Note, Notes, default_notes

# What of Ray's actor_options become ray_actor_options of the hidden deployment.
AS_RAY_ACTOR_OPTIONS = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type",
                        "runtime_env")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
FIELDS = ("name", "actor_class", "init_args", "init_kwargs", "actor_options")


def actor_configs(path: str, value: Any) -> list[dict[str, Any]]:
    """`deployment_actors`: a list of DeploymentActorConfig (or their
    fields as mappings), checked; OptionError naming the first bad one."""
    if not isinstance(value, list | tuple):
        raise OptionError(f"{path}: expected a list of DeploymentActorConfig, got "
                          f"{type_name(value)}")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        fields = item.dict() if hasattr(item, "FIELDS") else check_mapping(where, item)
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise OptionError(f"{where}: unknown key {unknown[0]!r} (expected one of "
                              f"{', '.join(FIELDS)})")
        name = check_str(f"{where}.name", fields.get("name"))
        if not name or name in {c["name"] for c in out}:
            raise OptionError(f"{where}.name: must be a name of its own, got {name!r}")
        actor_class = fields.get("actor_class")
        if not (inspect.isclass(actor_class) or (isinstance(actor_class, str) and actor_class)):
            raise OptionError(f"{where}.actor_class: expected a class or its import path, got "
                              f"{type_name(actor_class)}")
        args = fields.get("init_args") or ()
        if not isinstance(args, list | tuple):
            raise OptionError(f"{where}.init_args: expected a list, got {type_name(args)}")
        out.append({"name": name, "actor_class": actor_class, "init_args": tuple(args),
                    "init_kwargs": check_mapping(f"{where}.init_kwargs",
                                                 fields.get("init_kwargs") or {}),
                    "actor_options": check_mapping(f"{where}.actor_options",
                                                   fields.get("actor_options") or {})})
    return out


def actor_target(config: dict[str, Any]) -> Any:
    """The actor's class: as given, or imported from its path
    ("module:Class" or Ray's "module.Class"); OptionError when it cannot be."""
    target = config["actor_class"]
    if not isinstance(target, str):
        return target
    module, _, attr = colon_form(target).partition(":")
    try:
        found: Any = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as e:
        raise OptionError(f"deployment actor {config['name']!r}: cannot import actor_class "
                          f"{target!r} ({type(e).__name__}: {e})") from None
    return found


def deployment_name(parent: str, actor: str, version: str = "") -> str:
    """The hidden deployment's name: `<parent>-<actor>-<version>` (without
    the version: `<parent>-<actor>`) in the letters a deployment name may
    hold, at most 63 of them: a long parent name is cut first, then a long
    actor name (to 30); the version is kept whole."""
    def clean(text: str) -> str:
        return _NAME_CHARS.sub("-", text).strip("-_")

    tail = (clean(actor)[:30].rstrip("-_") or "actor") + (f"-{version}" if version else "")
    head = clean(parent)[:62 - len(tail)].rstrip("-_")
    return f"{head}-{tail}" if head else tail


def _digestible(value: Any) -> Any:
    """`value` as JSON when it is JSON, else the digest of its pickle."""
    try:
        return json.loads(json.dumps(value, sort_keys=True))
    except (TypeError, ValueError):
        return "pickle:" + hashlib.sha256(cloudpickle.dumps(value)).hexdigest()


def _class_identity(target: Any) -> Any:
    """An actor class as its import path, or its pickle's digest too when it
    cannot be imported back (a script's class)."""
    if isinstance(target, str):
        return target
    path = f"{getattr(target, '__module__', '')}:{getattr(target, '__qualname__', '')}"
    if path.startswith("__main__:") or "<locals>" in path:
        return [path, _digestible(target)]
    return path


# A deployment's options that define its code (the others, such as
# num_replicas and user_config, change it in place).
CODE_OPTIONS = ("version", "runtime", "runtime_env")


def code_version(code: dict[str, Any], options: dict[str, Any],
                 configs: list[dict[str, Any]]) -> str:
    """8 hex digits naming a version of a deployment's code and actors:
    `code` is what defines its replicas (import path, init args or their
    pickles' digests), `options` its options as given (only CODE_OPTIONS
    and ray_actor_options.runtime_env count), `configs` its checked
    actor configs (actor_configs)."""
    ray_actor = options.get("ray_actor_options") or {}
    picked = {k: options[k] for k in CODE_OPTIONS if options.get(k) is not None}
    if isinstance(ray_actor, dict) and ray_actor.get("runtime_env") is not None:
        picked["ray_actor_options.runtime_env"] = ray_actor["runtime_env"]
    actors = [{"name": c["name"], "class": _class_identity(c["actor_class"]),
               "args": _digestible([list(c["init_args"]), c["init_kwargs"]]),
               "options": _digestible(c["actor_options"])} for c in configs]
    blob = json.dumps({"code": _digestible(code), "options": _digestible(picked),
                       "actors": actors}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def actor_options(path: str, config: dict[str, Any], notes: Notes | None = None
                  ) -> dict[str, Any]:
    """The hidden deployment's options: one replica, its concurrency, and the
    resources Ray's actor_options ask for."""
    notes = notes or default_notes
    given = config["actor_options"]
    concurrency = given.get("max_concurrency")
    if concurrency is None:
        target = actor_target(config)
        is_async = inspect.isclass(target) and any(
            inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f)
            for _, f in inspect.getmembers(target, inspect.isfunction))
        concurrency = 1000 if is_async else 1
    options: dict[str, Any] = {"num_replicas": 1, "max_ongoing_requests": concurrency}
    ray_actor = {k: v for k, v in given.items() if k in AS_RAY_ACTOR_OPTIONS}
    if ray_actor:
        options["ray_actor_options"] = ray_actor
    for key in sorted(set(given) - {*AS_RAY_ACTOR_OPTIONS, "max_concurrency"}):
        notes(Note(f"actor_options.{key}", f"{path}.actor_options.{key}: not used: the actor "
                                           "is a deployment of one replica", False))
    return options


def actor_env(actors: dict[str, str]) -> str:
    """ACTORS_ENV's value: actor name -> its deployment's name."""
    return actors_env(actors)


def actors_here() -> dict[str, str]:
    """This replica's deployment actors (actor name -> deployment name)."""
    return actors_of({ACTORS_ENV: os.environ.get(ACTORS_ENV, "")})
