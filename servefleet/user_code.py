"""Finding user code by its import path, without walking into other modules.

`import_user_object("model:App.build", working_dir)` imports `model` (from
working_dir first) and follows `App`, then `build`. Every place that runs
user code by its import path resolves it here: replicas (replica/loader.py),
application builds (servefleet/build.py), gRPC servicer functions
(servefleet/grpc_servicers.py) and custom autoscaling policies
(servefleet/policy_runner.py). The rules, so that a path cannot reach code
the deployer did not write (`model:asyncio.base_events.subprocess.Popen`,
where `model.py` merely imports asyncio):

- no step of the walk may be a module, nor a dunder (`__globals__`);
- a class or function reached (a builtin included) must be user code: defined
  in the import path's own package, or in a module whose file lies in the
  working dir; a method of such a class is too;
- a servefleet deployment (`@deployment`) or bound application counts as the
  class or function it serves (an application: its ingress);
- any other object (a FastAPI app, a partial) is taken as the user made it.

`UserCodeError` (an ImportError) says what was refused and why.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import types
from typing import Any


class UserCodeError(ImportError):
    """The import path does not name the user's own code."""


def _served(obj: Any) -> Any:
    """What a servefleet Deployment or Application stands for, else `obj`."""
    func_or_class = getattr(obj, "func_or_class", None)
    if func_or_class is not None and type(obj).__module__ == "servefleet.api":
        return func_or_class  # a Deployment
    ingress = getattr(obj, "deployment", None)
    if ingress is not None and type(obj).__module__ == "servefleet.api":
        return _served(ingress)  # an Application: its ingress deployment
    return obj


def _is_code(obj: Any) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj)


def _user_module(name: str | None, package: str, root: str) -> bool:
    """Whether the module `name` is the import path's package or a file of root."""
    if not name:
        return False
    if name == package or name.startswith(package + "."):
        return True
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return bool(root and path and os.path.realpath(path).startswith(root + os.sep))


def import_user_object(import_path: str, working_dir: str = "") -> Any:
    """The object `import_path` ("module:attr.path") names; UserCodeError when
    the walk leaves user code, ImportError when the module is not found,
    AttributeError naming what is missing."""
    module_name, sep, attribute = import_path.partition(":")
    if not sep or not module_name or not attribute:
        raise UserCodeError(f"{import_path!r}: expected 'module:attribute'")
    if working_dir and working_dir not in sys.path:
        sys.path.insert(0, working_dir)
    root = os.path.realpath(working_dir) if working_dir else ""
    package = module_name.split(".")[0]
    found: Any = importlib.import_module(module_name)
    walked = module_name + ":"
    for i, part in enumerate(attribute.split(".")):
        if part.startswith("__") and part.endswith("__"):
            raise UserCodeError(f"{import_path!r}: {part} is Python's own, not user code")
        try:
            found = getattr(found, part)
        except AttributeError:
            raise AttributeError(f"module {module_name!r} has no attribute "
                                 f"{attribute!r}") from None
        walked += ("." if i else "") + part
        if isinstance(found, types.ModuleType):
            raise UserCodeError(f"{import_path!r}: {walked} is a module: an import path "
                                "names user code, not a walk into other modules")
        served = _served(found)
        if _is_code(served) and not _user_module(getattr(served, "__module__", None),
                                                 package, root):
            raise UserCodeError(f"{import_path!r}: {walked} is defined in "
                                f"{getattr(served, '__module__', None) or 'no module'!r}, not "
                                f"in {package!r} or the working dir: an import path names "
                                "user code")
    return found
