"""What the deploy policy reads of user modules on disk, without importing them.

The controller never imports user code (a module's top level runs on
import), so the policy (policy.py) judges an import path by its files; the
finders it shares with the import-time check are in servefleet/_private/applications/user_code.py
(`module_files`, `link_out`, `is_stdlib_file`). Here, what only the policy
reads:

- `package_dir` finds a virtualenv (a directory holding pyvenv.cfg) or a
  site-packages / dist-packages directory between an allowed root and a
  module's file: installed code, not the deployer's, however it is named;
- `import_bindings` lists the names a module's top level binds by `import`
  and in no other way: a path that walks on from one of them
  (`model:asyncio.subprocess.Popen`) leaves the module for another.

What this cannot see (a name bound by assignment to a module, a module
`__getattr__`, a star import) the import-time check refuses when the path
is imported (servefleet/_private/applications/user_code.py).
"""

from __future__ import annotations

import ast
import functools
import importlib.machinery as machinery
import os

from servefleet._private.applications.user_code import INSTALLED_DIR_NAMES, below

# A module larger than this is not parsed (the import-time check still
# holds): parsing stays cheap however many paths a request names.
MAX_PARSED_BYTES = 256 * 1024


def package_dir(real_file: str, root: str) -> str | None:
    """The virtualenv or site-packages directory between `root` (a real path,
    excluded) and real path `real_file`, or None."""
    directory = os.path.dirname(real_file)
    while directory != root and below(directory, root):
        if (os.path.basename(directory) in INSTALLED_DIR_NAMES
                or os.path.isfile(os.path.join(directory, "pyvenv.cfg"))):
            return directory
        directory = os.path.dirname(directory)
    return None


def import_bindings(path: str, package: str) -> dict[str, str | None] | None:
    """What the module in source file `path` binds at its top level by
    `import` and in no other way, without running it: name -> None for a
    module (`import x`, `import x.y as z`), or the module a `from x import
    name` takes it from, x outside `package` (a relative import, or one from
    the package, may name the package's own code). None when this cannot be
    told: not a source file, unreadable, over MAX_PARSED_BYTES, or a star
    import (which may bind any name)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    if not path.endswith(tuple(machinery.SOURCE_SUFFIXES)) or stat.st_size > MAX_PARSED_BYTES:
        return None
    return _import_bindings(path, package, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=256)
def _import_bindings(path: str, package: str, mtime_ns: int,
                     size: int) -> dict[str, str | None] | None:
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(MAX_PARSED_BYTES + 1), path)
    except (OSError, SyntaxError, ValueError):
        return None
    imported: dict[str, str | None] = {}
    other: set[str] = set()
    for node in _module_scope(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                imported.setdefault(alias.asname or alias.name.partition(".")[0], None)
        elif isinstance(node, ast.ImportFrom):
            source = node.module or ""
            ours = node.level > 0 or source.partition(".")[0] == package
            for alias in node.names:
                if alias.name == "*":
                    return None
                # Of two imports of one name, the weaker claim (not a module) holds.
                if ours:
                    other.add(alias.asname or alias.name)
                else:
                    imported[alias.asname or alias.name] = source
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            other.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            other.add(node.id)
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            other.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            other.add(node.rest)
    # A function may bind a module-level name through `global`.
    other |= {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    return {name: source for name, source in imported.items() if name not in other}


def _module_scope(tree: ast.Module) -> list[ast.AST]:
    """Every node run in the module's own scope: not the bodies of its
    functions, classes and lambdas (their names are bound, their insides not)."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        found.append(node)
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
                          | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))
    return found
