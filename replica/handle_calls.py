"""What a handle call (`x-servefleet-method`, http.py) runs, and with what:
the deployment's method it may call, and the (args, kwargs) its body must
unpickle to. Both refuse before any user code runs."""

from __future__ import annotations

import inspect
import reprlib
from typing import Any

from servefleet._private.applications.ingress import is_ingress

from .loader import UserDeployment


def method_of(deployment: UserDeployment, method: str) -> Any:
    """What a handle call of `method` runs, or None (private names are not
    callable; nor is an ASGI app, but the methods of an `ingress` class are)."""
    if deployment.is_asgi and not is_ingress(deployment.instance):
        return None
    if method == "__call__":
        return None if deployment.is_asgi else deployment.target
    if method.startswith("_") or not method.isidentifier():
        return None
    found = getattr(deployment.instance, method, None)
    return found if callable(found) and not inspect.isclass(deployment.instance) else None


def arguments(call: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A handle call's (args, kwargs) as unpickled; TypeError for any other
    value, which would otherwise fail in the call as if the method had."""
    if not (isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], tuple | list)
            and isinstance(call[1], dict) and all(isinstance(k, str) for k in call[1])):
        raise TypeError(f"expected (args, kwargs) with keyword names as strings, got "
                        f"{type(call).__name__} {reprlib.repr(call)}")
    return tuple(call[0]), call[1]
