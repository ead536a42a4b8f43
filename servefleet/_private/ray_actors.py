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

The parent's replicas learn their actors' deployments from the environment
variable ACTORS_ENV (a JSON object, actor name -> deployment name), which
is part of the parent's code: a change of its actors rolls its replicas,
as Ray rolls them. Differences from Ray: an actor's state is not kept when
it is replaced; during a rollout, old and new replicas share the one actor;
and the actor is listed among the application's deployments in
`serve.status()`.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
from typing import Any

from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.option_checks import (
    OptionError,
    check_mapping,
    check_str,
    type_name,
)
from servefleet._private.configuration.option_notes import Note, Notes, default_notes

ACTORS_ENV = "SERVEFLEET_DEPLOYMENT_ACTORS"
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


def deployment_name(parent: str, actor: str) -> str:
    """The hidden deployment's name: `<parent>-<actor>` in the letters a
    deployment name may hold, at most 63 of them."""
    name = _NAME_CHARS.sub("-", f"{parent}-{actor}").strip("-_")[:63].rstrip("-_")
    return name or "actor"


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
    return json.dumps(actors, sort_keys=True, separators=(",", ":"))


def actors_here() -> dict[str, str]:
    """This replica's deployment actors (actor name -> deployment name)."""
    text = os.environ.get(ACTORS_ENV, "")
    return json.loads(text) if text else {}
