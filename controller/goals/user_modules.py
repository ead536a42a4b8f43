"""What the deploy policy reads of user modules on disk, without importing them.

The controller never imports user code (a module's top level runs on
import), so the policy (policy.py) judges an import path by its files:

- `module_file` finds where `pkg.mod` would be imported from a working dir,
  as the import system would (PathFinder), without running anything;
- `package_dir` finds a virtualenv (a directory holding pyvenv.cfg) or a
  site-packages / dist-packages directory between the working dir and the
  file: installed code, not the deployer's, however the dir is named;
- `imported_names` lists the names a module binds by `import X` at its top
  level: an import path that starts its walk at one of them
  (`model:asyncio.subprocess.Popen`) walks into another module.

The replicas' resolver (servefleet/user_code.py) refuses the same walks at
import time, whatever slipped past these checks.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os

# A module larger than this is not parsed here (the import-time check still holds).
MAX_PARSED_BYTES = 1 << 20
PACKAGE_DIRS = ("site-packages", "dist-packages")


def module_file(module_name: str, where: str) -> str | None:
    """The file `module_name` (dotted) is imported from with `where` first on
    the path, or None when it is not found there."""
    locations = [where]
    origin = None
    for part in module_name.split("."):
        spec = importlib.machinery.PathFinder.find_spec(part, locations)
        if spec is None:
            return None
        origin = spec.origin
        locations = list(spec.submodule_search_locations or [])
    return origin if origin and origin not in ("namespace", "built-in") else (
        locations[0] if locations else None)


def package_dir(real_file: str, root: str) -> str | None:
    """The virtualenv or site-packages directory between `root` (a real path,
    excluded) and `real_file`, or None."""
    directory = os.path.dirname(real_file)
    while directory.startswith(root + os.sep):
        if (os.path.basename(directory) in PACKAGE_DIRS
                or os.path.isfile(os.path.join(directory, "pyvenv.cfg"))):
            return directory
        directory = os.path.dirname(directory)
    return None


def imported_names(path: str) -> set[str]:
    """Names bound by `import X` / `import X as Y` at a module's top level
    (and in its top-level if/try blocks); empty when it cannot be parsed."""
    try:
        if os.path.getsize(path) > MAX_PARSED_BYTES:
            return set()
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.If, ast.Try)):
            body += [*node.body, *node.orelse,
                     *(h for handler in getattr(node, "handlers", []) for h in handler.body),
                     *getattr(node, "finalbody", [])]
    return names
