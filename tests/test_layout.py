"""The layout rules the README promises: no import cycle between servefleet's
modules, no hand-written module over 400 lines, public modules apart from
internal ones (servefleet._private), and internal code never built on the
Ray-compatibility layer (servefleet.serve)."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Package name -> folder, as pyproject's package-dir installs them.
PACKAGES = {"servefleet": ROOT / "servefleet", "servefleet.controller": ROOT / "controller",
            "servefleet.proxy": ROOT / "proxy", "servefleet.replica": ROOT / "replica"}
GENERATED = ROOT / "servefleet" / "v1"
MAX_LINES = 400


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            if GENERATED in path.parents or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            if package == "servefleet" and name.split(".")[1:2] in (["controller"], ["proxy"],
                                                                   ["replica"]):
                continue
            found[name] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The servefleet modules `name` imports: at load time, inside functions
    and under TYPE_CHECKING alike. An import deferred into a function or kept
    for type checkers still ties the two modules together (each needs the
    other to be understood, and moving the import to the top breaks the
    program), so it counts for circles."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found |= {target} & known
            found |= {f"{target}.{a.name}" for a in node.names} & known
    return found - {name}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle in `graph`, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def import_graph() -> dict[str, set[str]]:
    found = modules()
    assert len(found) > 50, "the layout moved: update PACKAGES"
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_no_import_cycle() -> None:
    """No circle, type-only and function-level imports included: a lower
    module that needs an upper one's type takes a Protocol of what it uses
    (controller/metrics.py's ServingTerm, replica/websocket.py's SocketHost),
    or the type moves down."""
    graph = import_graph()
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_the_cycle_finder_finds_one() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


# Internal code: what users never import. The compatibility layer: Ray Serve's
# names (servefleet.serve), built on the internals, never under them.
INTERNAL = ("servefleet._private", "servefleet.controller", "servefleet.proxy",
            "servefleet.replica")
COMPAT = "servefleet.serve"


def test_internal_code_never_imports_the_compatibility_layer() -> None:
    """What both need (the handle errors Ray names) lives in the internals,
    and servefleet.serve re-exports it: an internal module that imported
    servefleet.serve would load Ray's API into every replica and proxy, and
    tie the internals to a layer that exists to match someone else's names.
    Module names in strings (importlib, subprocess -m) count too."""
    found = modules()
    graph = import_graph()
    offenders = sorted(f"{name} -> {dep}" for name, deps in graph.items()
                       if name.startswith(INTERNAL) for dep in deps
                       if dep == COMPAT or dep.startswith(COMPAT + "."))
    named = re.compile(rf"^{re.escape(COMPAT)}(\.|:|$)")
    for name, path in found.items():
        if name.startswith(INTERNAL):
            offenders += [f"{name}: {node.value!r}" for node in ast.walk(ast.parse(
                path.read_text())) if isinstance(node, ast.Constant)
                and isinstance(node.value, str) and named.match(node.value)]
    assert not offenders, offenders


PRIVATE = "servefleet._private"
# Names a room's "May import:" line may use besides other rooms.
SERVICES = {"controller", "proxy", "replica"}


def rooms() -> dict[str, Path]:
    """_private's subpackages ("rooms"), by short name."""
    return {name.rpartition(".")[2]: path for name, path in modules().items()
            if name.rpartition(".")[0] == PRIVATE and path.name == "__init__.py"}


def room_of(module: str, names: set[str]) -> str | None:
    """The room a module belongs to: a _private subpackage, one of the
    services, "public" (servefleet's user-facing modules); None for what any
    room may import (_private's own top-level modules, the generated API)."""
    parts = module.split(".")
    if module.startswith(PRIVATE + "."):
        return parts[2] if parts[2] in names else None
    if module.startswith("servefleet.v1") or module == PRIVATE:
        return None
    if len(parts) > 1 and parts[1] in SERVICES:
        return parts[1]
    return "public"


def allowed(docstring: str) -> set[str]:
    """The rooms a room's docstring lets it import: its "May import:" line
    (to the next full stop), names separated by commas and "and"."""
    match = re.search(r"^May import:(.*?)\.(\s|$)", docstring, re.M | re.S)
    assert match, "no 'May import:' line"
    text = re.sub(r"\(.*?\)", "", match.group(1), flags=re.S)
    names = {n.strip() for n in re.split(r",|\band\b", text.replace("\n", " "))}
    return names - {"", "nothing"}


def test_every_room_says_what_it_owns_and_may_import() -> None:
    """Every subpackage of servefleet._private opens with a docstring saying
    what it owns and, on a "May import:" line, which other rooms (or the
    services, or `public` servefleet modules) its modules may import; the
    import graph (function-level and type-only imports included) keeps to it."""
    found = rooms()
    assert {"configuration", "handles", "tracing", "local", "batching"} <= set(found)
    graph = import_graph()
    broken = []
    for room, init in found.items():
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(docstring.split()) > 12, f"{room}/__init__.py says too little of what it owns"
        rule = allowed(docstring)
        unknown = rule - set(found) - SERVICES - {"public"}
        assert not unknown, f"{room}/__init__.py names no such room: {unknown}"
        for module, deps in graph.items():
            if not module.startswith(f"{PRIVATE}.{room}.") and module != f"{PRIVATE}.{room}":
                continue
            broken += [f"{module} -> {dep}" for dep in sorted(deps)
                       if room_of(dep, set(found)) not in (None, room, *rule)]
    assert not broken, broken


def test_the_design_doc_maps_every_room() -> None:
    """docs/design.md's map of the code links each room, and nothing that
    is not one."""
    text = (ROOT / "docs" / "design.md").read_text()
    linked = set(re.findall(r"\(\.\./servefleet/_private/(\w+)/__init__\.py\)", text))
    assert linked == set(rooms())


def test_the_may_import_line_is_read() -> None:
    text = "Owns things.\n\nMay import: dataplane, security (TLS,\nand more) and\ntracing.\nMore."
    assert allowed(text) == {"dataplane", "security", "tracing"}
    assert allowed("May import: nothing (only _private's top-level modules).") == set()


def test_imports_inside_functions_and_for_type_checkers_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    from p.typed import T\n"
                      "def f():\n    from . import lazy\n    import p.plain\n")
    known = {"p.typed", "p.lazy", "p.plain", "p.unrelated"}
    assert imports("p.m", source, known) == {"p.typed", "p.lazy", "p.plain"}


def _python_files(root: Path, skip: set[str]) -> list[Path]:
    """The .py files under root, not descending into the folders named in
    skip (.build holds a running Kubernetes cluster's files, which come and
    go while a walk reads them)."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return found


def test_no_hand_written_module_over_400_lines() -> None:
    sources = [p for p in _python_files(ROOT, skip={".venv", ".build", "build", ".git"})
               if GENERATED not in p.parents]
    long = {str(p.relative_to(ROOT)): n for p in sources
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_package_is_installed() -> None:
    """pyproject lists packages one by one: a new folder must be in the list,
    or `pip install` (and the Docker image) ships without it."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["tool"]["setuptools"]["packages"])
    packages = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert packages - listed == set()


# Folders that tests and benchmarks put on sys.path to import their scripts.
SCRIPT_FOLDERS = [ROOT / "bench", ROOT / "examples", ROOT / "tests", ROOT / "tests" / "apps"]


def test_no_script_shadows_an_installed_module() -> None:
    """A script named like a package hides that package from everything in the
    same process once its folder is on sys.path: bench/websocket.py made
    selenium's `import websocket` fail in whichever test ran after the bench
    tests had imported bench/."""
    import importlib.machinery
    import sys

    folders = {str(f) for f in SCRIPT_FOLDERS} | {str(ROOT), ""}
    elsewhere = [p for p in sys.path if p not in folders and p != "."]
    shadows = {}
    for folder in SCRIPT_FOLDERS:
        for path in folder.glob("*.py"):
            name = path.stem
            if name in sys.builtin_module_names:
                shadows[str(path.relative_to(ROOT))] = "builtin"
            elif spec := importlib.machinery.PathFinder.find_spec(name, elsewhere):
                shadows[str(path.relative_to(ROOT))] = str(spec.origin)
    assert shadows == {}


def test_tests_and_benchmarks_import_the_installed_names() -> None:
    """`controller`, `proxy` and `replica` install as servefleet.*; importing a
    folder by its bare name loads its modules a second time (twice-registered
    metrics, two copies of module state), and only works from the repository."""
    bare = {"controller", "proxy", "replica"}
    found = []
    for folder in ("tests", "bench", "examples"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module or ""] if isinstance(node, ast.ImportFrom)
                         and not node.level else [])
                found += [f"{path.relative_to(ROOT)}: {n}" for n in names
                          if n.split(".")[0] in bare]
    assert not found, found


PUBLIC = ["servefleet", "servefleet.serve", "servefleet.serve.handle", "servefleet.serve.schema",
          "servefleet.serve.config", "servefleet.serve.exceptions", "servefleet.serve.metrics",
          "servefleet.metrics", "servefleet.client"]


def test_public_modules_say_what_they_promise_and_users_never_import_internals() -> None:
    import importlib

    for name in PUBLIC:
        module = importlib.import_module(name)
        promised = getattr(module, "__all__", None)
        assert promised, f"{name} has no __all__"
        missing = [n for n in promised if not hasattr(module, n)]
        assert not missing, f"{name}.__all__ names what it lacks: {missing}"
    # What users read and copy: the examples, the README, the docs.
    texts = [p for p in (ROOT / "examples").rglob("*.py") if "_pb2" not in p.name]
    texts += [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    texts += list((ROOT / "tests" / "compat" / "programs").glob("*.py"))
    internal = re.compile(r"^\s*(from|import) servefleet\._private", re.M)
    offenders = [str(p.relative_to(ROOT)) for p in texts if internal.search(p.read_text())]
    assert not offenders, f"users are shown internal imports in: {offenders}"
