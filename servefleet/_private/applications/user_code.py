"""Finding user code by its import path ("module:attribute.path").

A deploy names user code by import path, in its working dir: a deployment's
`import_path` and `grpc_servicer_functions`, an application's builder, a
custom autoscaling policy (`autoscaling_config.policy`, "module:function").
One set of rules says what such a path may reach, checked twice:

- on disk, without running anything, by the controller's deploy policy
  (controller/goals/policy.py) when a spec arrives, with the helpers here:
  `refused_name` (the names alone), `module_files` (the files an import
  would run), `link_out` and `is_stdlib_file` (where they really are); and
  what a module's source binds by `import` (controller/goals/user_modules.py);
- where the code is imported, by `import_user_object`: replicas
  (replica/loader.py; their gRPC servicer functions through
  grpc_servicers.py), application builds (build.py) and custom policy
  runners (policy_runner.py). What slipped past the first check meets this
  one.

The rules, so that a path names what the deployer's module defines and does
not walk from there into other code (where model.py merely imports asyncio,
`model:asyncio.base_events.subprocess.Popen` would otherwise construct Popen
with the deploy's init args):

1. No part is a dunder (`__main__`, `__globals__`), and the top-level module
   is neither the standard library's nor servefleet's.
2. When the module is found in the working dir, its files (links followed)
   lie in the working dir, and the module imported is that file, not a
   module of that name imported before. No module imported is a file of the
   standard library.
3. No step after the colon lands on a module; a class or function it lands
   on (a builtin, a method) is defined in the path's own top-level package
   (`model`; `pkg` and its submodules for `pkg.sub:X`); a `@deployment`
   counts as the class or function it wraps.
4. A step before the last may also land on an instance of a class of that
   package, nothing else. The last may land on any other value: a bound
   application, a FastAPI app, a `functools.partial`, taken as the user's
   module made it. Such a value gets no init args (those go to classes; a
   builder must be a function): it is called with a request or a policy's
   context at most.

Rules 3 and 4 need the objects, so only the import-time check holds them
all; the static check refuses what it can tell from the module's source (a
path that starts at a name bound by `import`).
"""

from __future__ import annotations

import importlib
import importlib.machinery as machinery
import inspect
import os
import sys
import sysconfig
import types
from typing import Any

# servefleet's own top-level packages (also under the names of its source dirs).
SERVEFLEET_MODULES = frozenset({"servefleet", "controller", "proxy", "replica"})
# What servefleet offers to deploy by name (servefleet.llm, docs/llm.md):
# these exact paths pass rule 1. They are servefleet's code, take data (JSON
# init args) only, and import the engine they are given as user code.
SERVEFLEET_DEPLOYABLE = frozenset({
    "servefleet.llm:build_openai_app",
    "servefleet._private.llm.server:LLMServer",
    "servefleet._private.llm.openai_ingress:OpenAIIngress",
    "servefleet._private.llm.ngram:NGramEngine",
    "servefleet._private.embeddings.server:EmbeddingServer",
    "servefleet._private.embeddings.encoder:SentenceEncoder",
})
STDLIB_DIR = os.path.realpath(sysconfig.get_paths()["stdlib"])
INSTALLED_DIR_NAMES = ("site-packages", "dist-packages")
# How the import system finds a module in a directory (its default loaders).
_LOADERS = [(machinery.ExtensionFileLoader, machinery.EXTENSION_SUFFIXES),
            (machinery.SourceFileLoader, machinery.SOURCE_SUFFIXES),
            (machinery.SourcelessFileLoader, machinery.BYTECODE_SUFFIXES)]


class UserCodeError(ImportError):
    """The import path does not name the user's own code."""


# -- on disk (the deploy policy; also used at import time) ----------------------


def refused_name(module_name: str, attribute: str) -> str | None:
    """Why the names alone are not user code (rule 1), or None."""
    parts = [*module_name.split("."), *attribute.split(".")]
    dunder = next((p for p in parts if p.startswith("__") and p.endswith("__")), None)
    if dunder is not None:
        return f"names {dunder}, which is Python's own, not user code"
    top = parts[0]
    if f"{module_name}:{attribute}" in SERVEFLEET_DEPLOYABLE:
        return None
    if top in sys.stdlib_module_names or top in sys.builtin_module_names \
            or top in SERVEFLEET_MODULES:
        return "names the standard library or servefleet itself, not user code"
    return None


def below(path: str, directory: str) -> bool:
    """Whether real path `path` is `directory` (a real path) or lies below it."""
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def module_files(module_name: str, where: str) -> list[str] | None:
    """The files an import of `module_name` with `where` first on the path
    runs (each package's `__init__`, then the module), found as the import
    system finds them, without running any and without filling its caches;
    None when the module is not found in `where`, or is a namespace package
    there (the import system would take a regular package of that name from
    anywhere on the path first)."""
    files: list[str] = []
    locations = [where or "."]
    parts = module_name.split(".")
    for depth, part in enumerate(parts, 1):
        spec = None
        for location in locations:
            spec = machinery.FileFinder(location, *_LOADERS).find_spec(part)
            if spec is not None:
                break
        if spec is None:
            return None
        if spec.origin and spec.has_location:
            files.append(spec.origin)
        elif depth == len(parts):
            # A namespace package: the import system prefers a regular package
            # of that name anywhere on the path, so this one is not "found".
            return None
        locations = list(spec.submodule_search_locations or [])
    return files


def link_out(files: list[str], where: str) -> str | None:
    """The real path of the first of `files` that lies outside `where` (a
    link out of the working dir), or None."""
    root = os.path.realpath(where or ".")
    return next((real for real in map(os.path.realpath, files) if not below(real, root)), None)


def is_stdlib_file(real: str) -> bool:
    """Whether real path `real` is a file of this interpreter's standard
    library (its site-packages, where packages are installed, excepted)."""
    if not below(real, STDLIB_DIR):
        return False
    return os.path.relpath(real, STDLIB_DIR).split(os.sep)[0] not in INSTALLED_DIR_NAMES


# -- at import time -------------------------------------------------------------


def import_user_object(import_path: str, working_dir: str = "") -> Any:
    """The object `import_path` ("module:attr.path") names, imported with
    `working_dir` first on sys.path. UserCodeError (an ImportError) naming
    the step a rule above refuses; ImportError when the module is not found
    (what its import raises, when it fails); AttributeError naming what is
    missing."""
    module_name, sep, attribute = import_path.partition(":")
    parts = [*module_name.split("."), *attribute.split(".")]
    if not sep or not all(part.isidentifier() for part in parts):
        raise UserCodeError(f"{import_path!r}: expected 'module:attribute'")
    problem = refused_name(module_name, attribute)
    if problem:
        raise UserCodeError(f"{import_path!r} {problem}")
    if working_dir and working_dir not in sys.path:
        sys.path.insert(0, working_dir)
    expected = module_files(module_name, working_dir) if working_dir else None
    if expected:
        _check_files(import_path, expected, working_dir)  # before any of them runs
    module = importlib.import_module(module_name)
    _check_imported(import_path, module, expected)
    package = module_name.partition(".")[0]
    found: Any = module
    steps = attribute.split(".")
    for i, step in enumerate(steps):
        try:
            found = getattr(found, step)
        except AttributeError:
            raise AttributeError(f"module {module_name!r} has no attribute "
                                 f"{attribute!r}") from None
        problem = _outside(found, package, last=i == len(steps) - 1)
        if problem:
            raise UserCodeError(f"{import_path!r}: {module_name}:{'.'.join(steps[:i + 1])} is "
                                f"{problem}; an import path names what {package} defines, not "
                                "a walk into other modules")
    return found


def _check_files(import_path: str, files: list[str], working_dir: str) -> None:
    """Rule 2, for the files found in the working dir."""
    outside = link_out(files, working_dir)
    if outside is not None:
        raise UserCodeError(f"{import_path!r}: {files[-1]!r} is a link to {outside!r}, "
                            "outside the working dir")
    stdlib = next((real for real in map(os.path.realpath, files) if is_stdlib_file(real)), None)
    if stdlib is not None:
        raise UserCodeError(f"{import_path!r}: {stdlib!r} is the standard library's, not "
                            "user code")


def _check_imported(import_path: str, module: types.ModuleType,
                    expected: list[str] | None) -> None:
    """Rule 2, for the module the import system gave."""
    file = getattr(module, "__file__", None)
    real = os.path.realpath(file) if file else None
    if real is not None and is_stdlib_file(real):
        raise UserCodeError(f"{import_path!r}: {module.__name__} is the standard library's "
                            f"{real!r}, not user code")
    if expected and real != os.path.realpath(expected[-1]):
        raise UserCodeError(f"{import_path!r}: the module imported ({real or 'no file'!r}) "
                            f"is not {expected[-1]!r} of the working dir: a module of that "
                            "name was imported before, or comes earlier on sys.path")


def _outside(obj: Any, package: str, last: bool) -> str | None:
    """What makes a step's object not the user's own (rules 3 and 4), or None."""
    if isinstance(obj, types.ModuleType):
        return "a module"
    code = _wrapped(obj)
    if inspect.isclass(code) or inspect.isroutine(code):
        owner = getattr(code, "__module__", None)
        return None if _ours(owner, package) else f"defined in {owner!r}"
    if last:
        return None
    owner = type(obj).__module__
    return None if _ours(owner, package) else \
        f"a {owner}.{type(obj).__qualname__}, which a walk may not step through"


def _wrapped(obj: Any) -> Any:
    """The class or function a `@deployment` wraps, else `obj`. (No module
    that made one is without servefleet._private.applications.api imported.)"""
    api = sys.modules.get("servefleet._private.applications.api")
    return obj.func_or_class if api is not None and isinstance(obj, api.Deployment) else obj


def _ours(module: object, package: str) -> bool:
    return isinstance(module, str) and (module == package or module.startswith(package + "."))
