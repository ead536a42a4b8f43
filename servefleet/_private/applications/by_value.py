"""Code and init args by value: what `servefleet.run` sends for a script or notebook.

Ray Serve users define deployments in the script (or notebook cell) that
calls `serve.run`; such classes and functions live in `__main__`, which a
replica cannot import (importing it would run the script again). So a local
run sends them by value, as Ray does:

- `is_by_value(target)`: whether a deployment's class or function cannot be
  found again by its module and qualified name (defined in `__main__`, in a
  function, or made by a decorator at run time);
- `dumps_target` / `loads_target`: the class or function, with cloudpickle.
  cloudpickle sends `__main__`'s things by value and everything importable
  by reference, so `from mylib import f` in the script stays an import in
  the replica (whose working dir is the script's directory);
- `dumps_init` / `loads_init`: the init args as any Python values (numpy
  arrays, custom objects). A bound deployment or a handle anywhere among
  them is pickled as a persistent id (a handle marker, as api.py writes
  them in JSON) and the replica makes it a DeploymentHandle.

Only replicas unpickle (never the controller, which stores the bytes in the
spec's `by_value` field and cannot read them), and only where the deploy
policy allows code by value (controller/goals/policy.py), since unpickling
runs whatever the sender chose.
"""

from __future__ import annotations

import io
import pickle
import sys
from collections.abc import Callable
from typing import Any

import cloudpickle  # type: ignore[import-untyped]

# Together, the pickled code and init args of one deployment. The spec must
# fit in one store write (1 MiB) with room for the rest, and GetDeployment
# answers must stay well under gRPC's 4 MiB default.
MAX_BY_VALUE_BYTES = 512 * 1024
PROTOCOL = 5
_HANDLE = "servefleet-handle"


class ByValueError(ValueError):
    """What a run sends by value cannot be pickled, or is too large."""


def is_by_value(target: Any) -> bool:
    """Whether `target` cannot be imported back by `module:qualname` (so it
    must travel by value)."""
    module_name = getattr(target, "__module__", None)
    qualname = getattr(target, "__qualname__", None)
    if not module_name or not qualname or module_name == "__main__" or "<" in qualname:
        return True
    module = sys.modules.get(module_name)
    if module is None or not getattr(module, "__file__", None):
        return True  # a notebook's cell module, or one made at run time
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return _unwrapped(found) is not target


def _unwrapped(obj: Any) -> Any:
    """The class or function a `@deployment` at module level wraps."""
    return getattr(obj, "func_or_class", obj)


def dumps_target(target: Any, what: str) -> bytes:
    """cloudpickle of a deployment's class or function; ByValueError naming `what`."""
    try:
        data: bytes = cloudpickle.dumps(target, protocol=PROTOCOL)
    except Exception as e:
        raise ByValueError(f"{what}: cannot be sent by value to its replicas "
                           f"({type(e).__name__}: {e})") from None
    return data


def loads_target(data: bytes) -> Any:
    return pickle.loads(data)


class _InitPickler(cloudpickle.Pickler):
    """cloudpickle, with bound deployments and handles as persistent ids."""

    def __init__(self, file: io.BytesIO, marker: Callable[[Any], dict[str, Any] | None]) -> None:
        super().__init__(file, protocol=PROTOCOL)
        self._marker = marker

    def persistent_id(self, obj: Any) -> Any:
        marker = self._marker(obj)
        return None if marker is None else (_HANDLE, marker)


def dumps_init(args: tuple[Any, ...], kwargs: dict[str, Any],
               marker: Callable[[Any], dict[str, Any] | None], what: str) -> bytes:
    """(args, kwargs) pickled; `marker(obj)` gives the handle marker of a bound
    deployment or handle, None for any other value. ByValueError naming `what`."""
    buffer = io.BytesIO()
    try:
        _InitPickler(buffer, marker).dump((tuple(args), dict(kwargs)))
    except Exception as e:
        raise ByValueError(f"{what}: the init args cannot be pickled "
                           f"({type(e).__name__}: {e})") from None
    return buffer.getvalue()


class _InitUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, handle: Callable[[dict[str, Any]], Any]) -> None:
        super().__init__(file)
        self._handle = handle

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == _HANDLE \
                and isinstance(pid[1], dict):
            return self._handle(pid[1])
        raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.100}")


def loads_init(data: bytes, handle: Callable[[dict[str, Any]], Any]
               ) -> tuple[list[Any], dict[str, Any]]:
    """The init args `dumps_init` pickled, with `handle(marker)` for each handle."""
    args, kwargs = _InitUnpickler(io.BytesIO(data), handle).load()
    return list(args), dict(kwargs)


def check_size(target: bytes, init: bytes, what: str) -> None:
    total = len(target) + len(init)
    if total > MAX_BY_VALUE_BYTES:
        raise ByValueError(
            f"{what}: its code and init args pickle to {total} bytes, over the "
            f"{MAX_BY_VALUE_BYTES} a deploy carries; load large data (weights, arrays) in "
            "the constructor, from a file or a URL, instead of passing it to .bind()")

