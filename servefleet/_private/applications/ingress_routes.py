"""Routes declared on methods of an ingress class, made to run on the instance that
got the request (servefleet/_private/applications/ingress.py).

When `@app.get("/items/{id}")` decorates a method in a class body, FastAPI
registers the plain function: `self` looks to it like a query parameter.
`bind_class_routes(app, cls)` replaces each such route of the app (or
router) with the same route, same place, same options, whose endpoint takes
`self` from a dependency: the instance the ingress put in the request's
scope (`SCOPE_KEY`). The other parameters (path, query, body, WebSocket) are
FastAPI's as before.

Which routes are the class's: those whose endpoint's qualified name is
`<class qualname>.<name>` in the class's module. Not "is it in the class's
dict": FastAPI allows two routes on methods of the same name (a GET and a
POST `item`), and only the last one stays in the class.

A route method is served only through the ingress instance: a request that
reaches it on the bare app fails with a RuntimeError saying so.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from starlette.requests import HTTPConnection

# The scope key holding the ingress instance serving the request.
SCOPE_KEY = "servefleet._private.applications.ingress"


async def _serving_instance(connection: HTTPConnection) -> Any:
    """The dependency standing for a route method's `self`."""
    instance = connection.scope.get(SCOPE_KEY)
    if instance is None:
        raise RuntimeError(f"{connection.url.path} is a route declared on a deployment class: "
                           "it is served only through that class's @ingress deployment, not by "
                           "the bare app")
    return instance


def _declared_on(fn: Any, cls: type) -> bool:
    qualname = getattr(fn, "__qualname__", "")
    return (qualname.rpartition(".")[0] == cls.__qualname__
            and getattr(fn, "__module__", None) == cls.__module__)


def bind_class_routes(app: Any, cls: type) -> int:
    """Rebind the class's routes of a FastAPI app or APIRouter (see the module
    docstring); how many. Any other app is left as it is (0)."""
    if "fastapi" not in sys.modules:  # FastAPI is optional; without it, no FastAPI app
        return 0
    from fastapi import APIRouter, FastAPI
    from fastapi.routing import APIRoute, APIWebSocketRoute

    if isinstance(app, FastAPI):
        router = app.router
    elif isinstance(app, APIRouter):
        router = app
    else:
        return 0
    bound = 0
    for i, route in enumerate(router.routes):
        if isinstance(route, APIRoute | APIWebSocketRoute) and _declared_on(route.endpoint, cls):
            router.routes[i] = _rebuilt(route, router, _bound_endpoint(route.endpoint, route))
            bound += 1
    if bound:
        mark = getattr(router, "_mark_routes_changed", None)
        if mark is not None:  # newer FastAPI caches its route tables by a version
            mark()
        if isinstance(app, FastAPI):
            app.openapi_schema = None
    return bound


def _rebuilt(route: Any, router: Any, endpoint: Any) -> Any:
    """The same kind of route with the same settings, around another endpoint.

    The route's constructor takes exactly what the route stores: the router's
    own settings were already merged into the route when it was added (so
    nothing is added twice, as re-adding through the router would).
    """
    kwargs: dict[str, Any] = {}
    for name, param in inspect.signature(type(route).__init__).parameters.items():
        if name in ("self", "path", "endpoint") or param.kind is param.VAR_KEYWORD:
            continue
        if hasattr(route, name):
            kwargs[name] = getattr(route, name)
        elif name == "dependency_overrides_provider":  # WebSocket routes do not keep it
            kwargs[name] = getattr(router, "dependency_overrides_provider", None)
    return type(route)(route.path, endpoint, **kwargs)


def _bound_endpoint(fn: Any, route: Any) -> Any:
    """`fn` with its first parameter (`self`) given by the ingress instance."""
    from fastapi import Depends

    try:
        signature = inspect.signature(fn, eval_str=True)
    except NameError:  # left as strings; FastAPI resolves them in fn's module
        signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                            params[0].POSITIONAL_OR_KEYWORD):
        raise TypeError(f"route {route.path}: {fn.__qualname__} is declared in a class but "
                        "takes no `self` parameter")
    first = params[0].replace(default=Depends(_serving_instance),
                              annotation=inspect.Parameter.empty)
    rest = [p.replace(kind=p.KEYWORD_ONLY)
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) else p
            for p in params[1:] if p.kind is not p.VAR_POSITIONAL]
    name = first.name

    endpoint: Any
    if inspect.isasyncgenfunction(fn):
        async def endpoint(**values: Any) -> Any:
            async for item in fn(values.pop(name), **values):
                yield item
    elif inspect.iscoroutinefunction(fn):
        async def endpoint(**values: Any) -> Any:
            return await fn(values.pop(name), **values)
    elif inspect.isgeneratorfunction(fn):
        def endpoint(**values: Any) -> Any:
            yield from fn(values.pop(name), **values)
    else:
        def endpoint(**values: Any) -> Any:
            return fn(values.pop(name), **values)

    functools.update_wrapper(endpoint, fn)  # name, doc and __wrapped__ (fn's module globals)
    endpoint.__signature__ = signature.replace(
        parameters=[first.replace(kind=first.POSITIONAL_OR_KEYWORD), *rest])
    return endpoint
