"""Importing a custom autoscaling policy (`policy: "module:function"`).

The controller imports the policy itself, as Ray Serve's controller does,
from the deployment's working_dir: the policy runs once per reconcile pass
and must be quick. Each load imports the module afresh (dropping what an
earlier load of the same top-level package left in sys.modules), so an
edited policy is picked up when the deployment is deployed again. A module
whose top-level name the controller itself uses (the standard library,
servefleet, grpc, ...) is refused: importing it from working_dir would
shadow the controller's own.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Any

from .autoscale import CustomPolicy

_lock = threading.Lock()
# Top-level module names that earlier policy loads imported.
_loaded: set[str] = set()


def load_policy(policy: str, working_dir: str) -> CustomPolicy:
    """The policy function; an exception that says why it cannot be loaded."""
    module_name, _, attribute = policy.partition(":")
    top = module_name.split(".")[0]
    with _lock:
        if top not in _loaded and (top in sys.modules or top in sys.stdlib_module_names):
            raise ImportError(f"module {top!r} is one the controller itself uses; give the "
                              "policy's module another name")
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            del sys.modules[name]
        _loaded.add(top)
        if working_dir:
            sys.path.insert(0, working_dir)
        try:
            found: Any = importlib.import_module(module_name)
        finally:
            if working_dir:
                sys.path.remove(working_dir)
    for part in attribute.split("."):
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"{policy} is a {type(found).__name__}, not a function")
    policy_function: CustomPolicy = found
    return policy_function
