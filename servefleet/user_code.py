"""Finding user code by its import path, without walking into other modules.

`import_user_object("model:App.build", working_dir)` imports `model` (from
working_dir first) and follows `App`, then `build`: each step must stay on
an object that belongs to the user's module (its `__module__` is the module
or one of its submodules), so `model:asyncio.subprocess.Popen`, where
`model.py` merely imports asyncio, is refused rather than reaching Popen.
`UserCodeError` says what was refused.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from typing import Any


class UserCodeError(ImportError):
    """The import path does not name an object of the user's own module."""


def _belongs(obj: Any, module: str) -> bool:
    if isinstance(obj, types.ModuleType):
        return False
    owner = getattr(obj, "__module__", None)
    if owner is None and not inspect.isclass(obj):
        owner = getattr(type(obj), "__module__", None)
    return isinstance(owner, str) and (owner == module or owner.startswith(module + "."))


def import_user_object(import_path: str, working_dir: str = "") -> Any:
    """The object `import_path` ("module:attr.path") names; UserCodeError when
    a step leaves the user's module, ImportError when the module is not found."""
    module_name, sep, attribute = import_path.partition(":")
    if not sep or not module_name or not attribute:
        raise UserCodeError(f"{import_path!r}: expected 'module:attribute'")
    if working_dir and working_dir not in sys.path:
        sys.path.insert(0, working_dir)
    found: Any = importlib.import_module(module_name)
    top = module_name.split(".")[0]
    walked = module_name
    for part in attribute.split("."):
        found = getattr(found, part)
        walked += ("." if walked != module_name else ":") + part
        if not _belongs(found, top):
            what = "a module" if isinstance(found, types.ModuleType) else \
                f"defined in {getattr(found, '__module__', None) or type(found).__module__}"
            raise UserCodeError(f"{import_path!r}: {walked} is {what}, not part of "
                                f"{top!r}: an import path names the user's own code only")
    return found
