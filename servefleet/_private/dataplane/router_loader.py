"""Making the router a deployment names (routers.py says what a router is).

Where a router's class is loaded is the caller's choice: handles, inside
replicas, load any; a proxy loads servefleet's own and classes of the modules
its operator allows (--allow-router-module), never what a deploy alone names.
Kept apart from routers.py because it builds the routers servefleet ships
(prefix_affinity.py), which subclass routers.py's `RequestRouter`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .prefix_affinity import PrefixAffinity
from .router_names import POWER_OF_TWO, PREFIX_AFFINITY
from .routers import RequestRouter

logger = logging.getLogger(__name__)


def allow_all(module: str) -> bool:
    return True


def allow_modules(prefixes: Iterable[str]) -> Callable[[str], bool]:
    """A module allow-list: a module is allowed when a prefix is its name or
    one of its parent packages."""
    allowed = tuple(p.strip().rstrip(".") for p in prefixes if p.strip())

    def allows(module: str) -> bool:
        return any(module == p or module.startswith(p + ".") for p in allowed)
    return allows


@dataclass
class RouterLoader:
    """Makes the routers deployments name, with this process's allow rule."""

    allows: Callable[[str], bool] = allow_all
    _refused: set[str] = field(default_factory=set)

    def make(self, name: str, kwargs_json: str, where: str) -> RequestRouter | None:
        """The router for `name` (None: the default, inline), or None after
        logging why it cannot be had."""
        if not name or name == POWER_OF_TWO:
            return None
        try:
            kwargs = json.loads(kwargs_json) if kwargs_json else {}
            if name == PREFIX_AFFINITY:
                return PrefixAffinity(**kwargs)
            return self._user_router(name, kwargs)
        except Exception as e:
            key = f"{where} {name} {kwargs_json}"
            if key not in self._refused:
                self._refused.add(key)
                logger.error("%s: request router %s cannot be used (%s: %s); routing by "
                             "power of two choices", where, name, type(e).__name__, e)
            return None

    def _user_router(self, name: str, kwargs: dict[str, Any]) -> RequestRouter:
        from servefleet._private.applications.user_code import import_user_object

        module = name.partition(":")[0]
        if not self.allows(module):
            raise PermissionError(f"this process does not load routers from {module!r} "
                                  "(servefleet proxy --allow-router-module)")
        cls = import_user_object(name)
        if not (isinstance(cls, type) and issubclass(cls, RequestRouter)):
            raise TypeError(f"{name} is not a RequestRouter subclass")
        return cls(**kwargs)
