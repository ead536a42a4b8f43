"""Loading user code: import `module:attr` (or unpickle what a local run sent
by value) and make a deployment out of it.

What `attr` names decides the kind of deployment:

- a class: constructed once with the init args; its instance's `__call__`
  receives each HTTP request (unless the instance is itself an ASGI app);
- an ASGI app (a FastAPI or Starlette instance, or any callable taking
  `scope, receive, send`): requests are handed to it as they are;
- a function: called with each HTTP request.

The optional `reconfigure(user_config)` and `check_health()` methods of a
class are found here too. Sync user code is run in a thread pool by the
caller, never on the event loop, with one exception, Ray's: the class's
constructor runs on the replica's loop (`build_on_loop`), so that code
there may start tasks on it (`asyncio.get_running_loop()`,
`asyncio.create_task`); an `async def __init__` is awaited there. The
controller's health checks and probes are answered on the control loop
meanwhile (replica/control_loop.py), so a slow constructor fails none.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from servefleet._private.applications.by_value import loads_init, loads_target
from servefleet._private.applications.user_code import import_user_object


class LoadError(Exception):
    """The import path does not name something servefleet can serve."""


@dataclass
class UserDeployment:
    # What serves requests: an ASGI app, or a callable taking a Request.
    target: Any
    is_asgi: bool
    reconfigure: Callable[[Any], Any] | None
    check_health: Callable[[], Any] | None
    # The object named by the import path, for handle method calls.
    instance: Any


def _is_asgi(obj: Any) -> bool:
    """An ASGI app takes (scope, receive, send) and is a coroutine function."""
    call: Any
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        call = obj
    else:
        call = getattr(type(obj), "__call__", None)  # noqa: B004 - the method itself
    if call is None or not inspect.iscoroutinefunction(call):
        # Starlette and FastAPI define `async def __call__(self, scope, receive, send)`.
        return False
    try:
        params = [p for p in inspect.signature(call).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return [p.name for p in params][-3:] == ["scope", "receive", "send"]


def import_attr(import_path: str, working_dir: str = "") -> Any:
    """What `import_path` names, never a walk into other modules (user_code.py);
    LoadError when the attribute is missing, UserCodeError when refused."""
    try:
        return import_user_object(import_path, working_dir)
    except AttributeError as e:
        raise LoadError(str(e)) from None


def unpickle_target(data: bytes, working_dir: str = "") -> Any:
    """The class or function a local run sent by value
    (servefleet/_private/applications/by_value.py), with `working_dir` (the
    script's directory) first on sys.path so that the modules it imports from
    there are found; LoadError when it cannot be loaded."""
    if working_dir and working_dir not in sys.path:
        sys.path.insert(0, working_dir)
    try:
        return loads_target(data)
    except Exception as e:
        raise LoadError(f"the code sent by value cannot be loaded here "
                        f"({type(e).__name__}: {e}); a module it imports may be missing "
                        "from the working dir, or this Python differs from the sender's") from e


def unpickle_init_args(data: bytes, working_dir: str, handle: Callable[[dict[str, Any]], Any]
                       ) -> tuple[list[Any], dict[str, Any]]:
    """The init args a local run sent by value, with `handle(marker)` making
    each bound deployment a handle; LoadError when they cannot be loaded."""
    if working_dir and working_dir not in sys.path:
        sys.path.insert(0, working_dir)
    try:
        return loads_init(data, handle)
    except Exception as e:
        raise LoadError(f"the init args sent by value cannot be loaded here "
                        f"({type(e).__name__}: {e})") from e


def build(obj: Any, args: list, kwargs: dict, has_user_config: bool) -> UserDeployment:
    """Construct the deployment `obj` names here and now (this runs the
    user's constructor in the calling thread; an `async def __init__` is
    refused: `build_on_loop` awaits it)."""
    obj = _unwrapped(obj)
    if inspect.isclass(obj):
        if inspect.iscoroutinefunction(obj.__init__):
            raise LoadError(f"{obj.__name__}.__init__ is async def: it needs the replica's "
                            "event loop")
        return _from_instance(obj, obj(*args, **kwargs), has_user_config)
    return _not_a_class(obj, args, kwargs, has_user_config)


async def build_on_loop(obj: Any, args: list, kwargs: dict,
                        has_user_config: bool) -> UserDeployment:
    """Construct the deployment `obj` names on the running loop, as Ray's
    replica does: a plain `__init__` is called right here (it holds the loop
    while it runs), an `async def __init__` is awaited on an instance made by
    `__new__`. LoadError when `obj` cannot be served; what the constructor
    raises propagates."""
    obj = _unwrapped(obj)
    if not inspect.isclass(obj):
        return _not_a_class(obj, args, kwargs, has_user_config)
    if inspect.iscoroutinefunction(obj.__init__):
        instance: Any = obj.__new__(obj)
        returned = await instance.__init__(*args, **kwargs)
        if returned is not None:
            raise LoadError(f"{obj.__name__}.__init__ returned {returned!r}: it must return None")
    else:
        instance = obj(*args, **kwargs)
    return _from_instance(obj, instance, has_user_config)


def _unwrapped(obj: Any) -> Any:
    from servefleet._private.applications.api import Deployment

    if isinstance(obj, Deployment):  # an @deployment-decorated class or function
        return obj.func_or_class
    return obj


def _from_instance(cls: type, instance: Any, has_user_config: bool) -> UserDeployment:
    reconfigure = getattr(instance, "reconfigure", None)
    if has_user_config and reconfigure is None:
        raise LoadError(f"user_config is set but {cls.__name__} has no reconfigure() method")
    if _is_asgi(instance):
        target, is_asgi = instance, True
    elif callable(instance):
        target, is_asgi = instance, False
    else:
        target, is_asgi = None, False  # reachable through handle method calls only
    return UserDeployment(target=target, is_asgi=is_asgi, reconfigure=reconfigure,
                          check_health=getattr(instance, "check_health", None),
                          instance=instance)


def _not_a_class(obj: Any, args: list, kwargs: dict, has_user_config: bool) -> UserDeployment:
    if args or kwargs:
        raise LoadError("init args are given but the import path names a function or an app, "
                        "not a class")
    if has_user_config:
        raise LoadError("user_config needs a class with a reconfigure() method")
    if _is_asgi(obj):
        return UserDeployment(obj, True, None, None, obj)
    if callable(obj):
        return UserDeployment(obj, False, None, None, obj)
    raise LoadError(f"{obj!r} is not a class, a function or an ASGI app")
