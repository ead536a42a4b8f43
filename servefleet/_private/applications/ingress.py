"""`ingress(app)`: a FastAPI app wrapped around a deployment class, as Ray Serve's
`serve.ingress` does.

    app = FastAPI()

    @deployment
    @ingress(app)
    class Shop:
        def __init__(self, stock: dict) -> None:
            self.stock = stock

        @app.get("/items/{name}")
        def item(self, name: str, q: str | None = None) -> dict:
            return {"name": name, "count": self.stock.get(name, 0), "q": q}

    @app.get("/health")          # a route of the app, outside the class
    def health() -> str:
        return "ok"

What `ingress` takes:

- a FastAPI app or an APIRouter: routes declared as methods of the class
  (taking `self`) are served by the instance that gets the request; other
  routes of the app as they are (a router is served in a FastAPI app of its
  own, which FastAPI's routes need);
- any other ASGI app (Starlette, a bare `async def app(scope, receive, send)`):
  served as it is;
- a function taking no arguments and returning an ASGI app (Ray's builder
  form): called once per instance, after the class's `__init__`, in the
  replica; so the app and whatever its routes hold are made where they run.

`ingress(app)` also works without a class, as `deployment(ingress(app)())`:
the class is then an empty one named `ASGIIngressDeployment`, as in Ray.
Anything else is refused at once: a class with a `__call__` (the app answers
HTTP; Ray refuses it too), a non-class, an app that is none of the above.

How a route method finds its instance: the decorated class's instances are
ASGI apps (`async def __call__(self, scope, receive, send)`, which is how the
replica's loader recognises an ASGI deployment), and each request's scope
carries the instance it reached; the method's `self` is a FastAPI dependency
reading it (routes.py). The app object is shared by the class's instances;
a replica holds one. The class's other methods stay ordinary methods, for
handle calls.

Lifespan: the app's startup handlers (FastAPI's `lifespan=`, Starlette's
`on_startup`) run once per instance, before its first request, or when the
replica calls `start_app(instance)` after construction; `stop_app(instance)`
runs the shutdown handlers. A failed startup fails every request with the
handlers' error. The lifespan state they yield reaches `request.state`.

Errors: as in Ray Serve, a route that lets through a handle call's
BackPressureError or DeploymentUnavailableError (a deployment it called
could not serve it) is answered 503 with the error, not Starlette's 500,
unless the app has a handler of its own for them.

The wrapper class keeps the decorated class's name, module and qualname, so
the import path `module:Name` still finds it, and it pickles by value with
cloudpickle when the class was defined in `__main__`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any

from starlette.datastructures import State
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from servefleet._private.applications.asgi_lifespan import Lifespan
from servefleet._private.applications.ingress_routes import SCOPE_KEY, bind_class_routes
from servefleet._private.handle_errors import BackPressureError, DeploymentUnavailableError

logger = logging.getLogger(__name__)


def _is_asgi_callable(obj: Any) -> bool:
    """Whether `obj` takes (scope, receive, send): an app, not a builder."""
    call: Any = obj
    if not (inspect.isfunction(obj) or inspect.ismethod(obj)):
        call = getattr(type(obj), "__call__", None)  # noqa: B004 - the method itself
    if call is None:
        return False
    try:
        names = [p.name for p in inspect.signature(call).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return False
    return len(names) >= 3 and inspect.iscoroutinefunction(call)


def _is_builder(app: Any) -> bool:
    return inspect.isfunction(app) and not _is_asgi_callable(app)


class _PicklableState(State):
    """Starlette's `State`, picklable: the class travels by value with its app
    (code by value), and a plain State made by unpickling, without __init__,
    recurses in its __getattr__."""

    def __reduce__(self) -> tuple[Any, ...]:
        return _PicklableState, (dict(self._state),)


def _make_picklable(app: Any) -> None:
    """Give the app's State objects (`app.state`) the picklable class, in place."""
    for holder in (app, getattr(app, "router", None)):
        for value in vars(holder).values() if hasattr(holder, "__dict__") else ():
            if type(value) is State:
                # Not `value.__class__ = ...`: State.__setattr__ would store a key.
                object.__setattr__(value, "__class__", _PicklableState)


class ASGIIngressDeployment:
    """The class of `ingress(app)()`: one that keeps its init args, as Ray's does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs


class _IngressInstance:
    """What every ingress class adds to the user's class: the ASGI face."""

    _servefleet_source: Any  # the app, or the builder that makes one (class attribute)
    _servefleet_app: Any
    _servefleet_lifespan: Lifespan | None
    _servefleet_starting: asyncio.Task[dict[str, Any]] | None

    def _servefleet_attach(self) -> None:
        source = type(self)._servefleet_source
        app = source() if _is_builder(source) else source
        if not callable(app):
            raise TypeError(f"the ingress builder {source.__qualname__} returned "
                            f"{type(app).__name__}, not an ASGI app")
        _answer_unserved(app)
        self._servefleet_app = app
        self._servefleet_lifespan = None
        self._servefleet_starting = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":  # a server running the instance itself
            await self._servefleet_app(scope, receive, send)
            return
        state = await start_app(self)
        scope = {**scope, SCOPE_KEY: self}
        if state:
            scope["state"] = {**scope.get("state", {}), **state}
        await self._servefleet_app(scope, receive, send)


async def _unserved(request: Request, error: Exception) -> PlainTextResponse:
    return PlainTextResponse(f"{type(error).__name__}: {error}", 503)


def _answer_unserved(app: Any) -> None:
    """Answer the handle errors that say a called deployment could not serve
    with 503 (see the module's docstring), in a Starlette or FastAPI app."""
    handlers = getattr(app, "exception_handlers", None)
    if isinstance(handlers, dict) and hasattr(app, "add_exception_handler"):
        for error in (BackPressureError, DeploymentUnavailableError):
            if error not in handlers:
                app.add_exception_handler(error, _unserved)


def is_ingress(obj: Any) -> bool:
    """Whether `obj` is an instance (or class) made by `ingress`."""
    cls = obj if inspect.isclass(obj) else type(obj)
    return issubclass(cls, _IngressInstance)


async def start_app(instance: Any) -> dict[str, Any]:
    """Run the instance's app startup handlers, once (later calls wait for the
    first); the lifespan state. Raises LifespanError when they failed, each
    time it is asked. Nothing to do for an instance that is no ingress."""
    if not is_ingress(instance):
        return {}
    if instance._servefleet_starting is None:
        instance._servefleet_lifespan = Lifespan(instance._servefleet_app)
        instance._servefleet_starting = asyncio.ensure_future(
            instance._servefleet_lifespan.startup())
    return dict(await asyncio.shield(instance._servefleet_starting))


async def stop_app(instance: Any) -> None:
    """Run the instance's app shutdown handlers, if its startup ran."""
    if is_ingress(instance) and instance._servefleet_lifespan is not None:
        lifespan, instance._servefleet_lifespan = instance._servefleet_lifespan, None
        await lifespan.shutdown()


def _check_app(app: Any) -> None:
    if inspect.isclass(app):
        raise TypeError(f"ingress() takes an app or a function returning one, not the class "
                        f"{app.__qualname__}; write @ingress(app) above the class")
    if not callable(app):
        raise TypeError(f"ingress() takes a FastAPI app, an ASGI app or a function returning "
                        f"one; got {type(app).__name__}")
    if inspect.isfunction(app) and not _is_builder(app) and not inspect.iscoroutinefunction(app):
        raise TypeError(f"ingress(): {app.__qualname__} is neither an async ASGI app nor a "
                        "function taking no arguments that returns one")
    if _is_builder(app):
        required = [p for p in inspect.signature(app).parameters.values()
                    if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if required:
            raise TypeError(f"ingress(): the builder {app.__qualname__} must take no arguments "
                            f"(it has {', '.join(p.name for p in required)})")


def ingress(app: Any) -> Callable[..., type]:
    """Serve `app` with the decorated class's instances; see the module docstring.

    TypeError for an `app` that is neither an ASGI app nor a builder; the
    returned decorator raises ValueError for a non-class or a class with
    `__call__` (Ray Serve's errors).
    """
    _check_app(app)

    def decorator(cls: type | None = None) -> type:
        module = None
        if cls is None:
            cls = ASGIIngressDeployment
            module = sys._getframe(1).f_globals
        if not inspect.isclass(cls):
            raise ValueError(f"@ingress must be used with a class, got {cls!r}")
        if "__call__" in _own_attributes(cls):
            raise ValueError(f"classes passed to @ingress may not have a __call__ method "
                             f"({cls.__qualname__} has one): the app answers HTTP requests")
        bind_class_routes(app, cls)
        served = _servable(app)
        if not _is_builder(served):
            _make_picklable(served)
        return _wrapper_class(cls, served, module)

    return decorator


def _servable(app: Any) -> Any:
    """An APIRouter in a FastAPI app of its own: FastAPI's routes need the app's
    middleware (a router alone fails every request); anything else as it is."""
    fastapi = sys.modules.get("fastapi")  # not imported: the app is no FastAPI one
    if fastapi is not None and isinstance(app, fastapi.APIRouter):
        served = fastapi.FastAPI()
        served.include_router(app)
        return served
    return app


def _own_attributes(cls: type) -> set[str]:
    """Names defined by the class and its bases other than object."""
    return {name for klass in cls.__mro__[:-1] for name in vars(klass)}


def _wrapper_class(cls: type, app: Any, module: dict[str, Any] | None) -> type:
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        cls.__init__(self, *args, **kwargs)  # type: ignore[misc]
        _IngressInstance._servefleet_attach(self)

    namespace = {"__init__": __init__, "__doc__": cls.__doc__, "__module__": cls.__module__,
                 "__qualname__": cls.__qualname__, "_servefleet_source": app}
    wrapper = type(cls.__name__, (cls, _IngressInstance), namespace)
    if module is not None:
        _register(wrapper, module)
    return wrapper


def _register(wrapper: type, module: dict[str, Any]) -> None:
    """Give the class of `ingress(app)()` a name in the calling module, so that
    a replica importing `module:name` finds it (ASGIIngressDeployment, then _1, ...)."""
    name = "ASGIIngressDeployment"
    n = 0
    while isinstance(module.get(name), type) and is_ingress(module[name]):
        n += 1
        name = f"ASGIIngressDeployment_{n}"
    wrapper.__module__ = module.get("__name__", wrapper.__module__)
    wrapper.__qualname__ = name
    module[name] = wrapper
