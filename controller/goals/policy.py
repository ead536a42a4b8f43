"""What a deploy may ask the controller's host to run (the operator's policy).

A spec names code by `runtime.working_dir` (a directory on the controller's
host, or inside the image), an image for the Docker runtime, and environment
variables for the replica. Each is a way to run code of the client's
choosing, so the operator bounds them with controller flags:

- `--allow-working-dir DIR` (repeatable): working dirs must lie below one of
  these (symlinks and `..` resolved first). Default: below the controller's
  working directory when it listens on loopback, and none otherwise.
- `--allow-image PATTERN` (repeatable, shell-style `*`/`?`): images a spec may
  name. Default: only the controller's --docker-image.
- `--allow-env` / `--no-allow-env`: whether a spec may set `runtime.env`.
  Default: allowed on loopback, refused otherwise.
- An import path (`import_path`, an application's builder, a gRPC servicer
  function, `autoscaling_config.policy`) names user code, never the standard
  library's or servefleet's, and no dunder (a deployment `subprocess:Popen`
  with init args would run any command). Where the path is imported on this
  host (replicas of the process runtime or with mounted working dirs; builds
  and custom policies always), its module is looked for in the spec's
  working dir (the controller's directory when it names none):
  - found there: every file the import runs (package `__init__`s, the
    module), links followed, lies in the working dir, in an allowed root,
    outside the standard library, and, unless the roots are `/`, not in a
    virtualenv or site-packages below the root (unless
    `--allow-packages-below` names it); and the path after the colon does
    not start at a name the module binds by `import` (user_modules.py): a
    module never, a name from the standard library or servefleet never, a
    name from another package not to walk on from it;
  - not found there: refused as installed code unless the roots are `/`
    (the operator trusts every directory); a typo is INVALID_ARGUMENT.
  Replicas, builds and policy runners check the walk again when they import
  (servefleet/_private/applications/user_code.py: no module, no class or function of another
  package along the way). With `--docker-code image` a deployment's code is
  inside the image, which --allow-image vouches for: only the names are
  checked.
- Code by value (a spec's `by_value`: a pickled class or function, pickled
  init args; what `servefleet.run` sends for a script or a notebook) runs
  only where `--allow-code-by-value` is given; unpickling runs whatever the
  sender chose, like an import path anywhere, so it is off by default. The
  controller that `servefleet.run` starts for its own process (loopback, its
  user) is given the flag. Such a spec's `import_path` only names the code:
  it is never imported, so it is not checked against the working dir. The
  controller never unpickles: only replicas do.
- With `--runtime none` no user code runs on this host: a custom autoscaling
  policy is FAILED_PRECONDITION (its runner would run here), and so is an
  application (goals/applications.py: it is built by importing its code).

A spec outside the policy is refused with PERMISSION_DENIED naming the field
and the rule, before anything is written to the store; an import_path whose
module exists nowhere (a typo) is INVALID_ARGUMENT naming the module and the
directory searched.
"""

from __future__ import annotations

import fnmatch
import importlib.machinery
import os
from collections.abc import Sequence
from dataclasses import dataclass

from servefleet._private.applications.user_code import (
    SERVEFLEET_DEPLOYABLE,
    below,
    is_stdlib_file,
    link_out,
    module_files,
    refused_name,
)
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as pb

from ..errors import FailedPrecondition, InvalidArgument, PermissionDenied
from .user_modules import import_bindings, package_dir


@dataclass(frozen=True)
class DeployPolicy:
    # Real paths; a working dir must be one of them or below one. Empty: none allowed.
    working_dir_roots: tuple[str, ...] = ("/",)
    # fnmatch patterns for runtime.image. Empty: no image may be named.
    image_patterns: tuple[str, ...] = ("*",)
    allow_env: bool = True
    # Whether replicas' code is on this host (process runtime, Docker with
    # mounted working dirs): then their import paths are checked against the
    # files here.
    code_on_host: bool = True
    cwd: str = "/"
    # Real paths of virtualenvs or site-packages below a working dir whose
    # modules import paths may name (--allow-packages-below). Empty: none.
    packages_below: tuple[str, ...] = ()
    # Whether user code from a spec may run on this host at all (builds and
    # custom autoscaling policies run here whatever the runtime). False
    # under --runtime none.
    runs_user_code: bool = True
    # Whether a spec may carry code or init args by value (pickles its
    # replicas load): --allow-code-by-value.
    allow_code_by_value: bool = False
    # The controller's own files on this host (its sqlite store and the
    # store's companions): never a deployment's code, even inside its
    # working dir (code_digest.py leaves them out of the digest).
    not_code: tuple[str, ...] = ()

    @classmethod
    def build(cls, *, loopback: bool, cwd: str, default_image: str,
              working_dirs: Sequence[str] = (), images: Sequence[str] = (),
              allow_env: bool | None = None, code_on_host: bool = True,
              packages_below: Sequence[str] = (), runs_user_code: bool = True,
              allow_code_by_value: bool = False, not_code: Sequence[str] = ()) -> DeployPolicy:
        """The policy from the flags, with the defaults described above."""
        roots = working_dirs or ([cwd] if loopback else [])
        return cls(tuple(os.path.realpath(r) for r in roots),
                   tuple(images) or (default_image,),
                   loopback if allow_env is None else allow_env, code_on_host,
                   os.path.realpath(cwd), tuple(os.path.realpath(d) for d in packages_below),
                   runs_user_code, allow_code_by_value, tuple(not_code))

    def check_import(self, field: str, import_path: str, working_dir: str,
                     on_host: bool | None = None) -> None:
        """PermissionDenied naming `field` when `import_path` is not user code;
        InvalidArgument when its module is found neither in the working dir
        nor installed. `on_host`: whether the path is imported on this host
        (default: where replicas' code is, `code_on_host`); if not, only the
        names are checked."""
        module_name, _, attribute = import_path.partition(":")
        shown = repr(import_path[:200])
        problem = refused_name(module_name, attribute)
        if problem:
            raise PermissionDenied(f"{field}: {shown} {problem}")
        if import_path in SERVEFLEET_DEPLOYABLE:
            return  # servefleet's own, installed with it: not in any working dir
        if not (self.code_on_host if on_host is None else on_host):
            return  # in an image that --allow-image vouches for, or run nowhere
        where = working_dir or self.cwd
        files = module_files(module_name, where)
        if files is None:
            self._not_in_working_dir(field, import_path, module_name, where)
            return
        outside = link_out(files, where)
        if outside is not None:
            raise PermissionDenied(f"{field}: {shown} is found through a link to "
                                   f"{outside[:200]!r}, outside the working dir")
        for real in map(os.path.realpath, files):
            self._check_file(field, shown, real)
        self._check_walk(field, shown, files[-1], module_name, attribute)

    def _not_in_working_dir(self, field: str, import_path: str, module_name: str,
                            where: str) -> None:
        if "/" in self.working_dir_roots:
            return  # the operator trusts every directory, installed code included
        top = module_name.partition(".")[0]
        if (importlib.machinery.PathFinder.find_spec(top) is None  # a typo, most likely
                or module_files(top, where) is not None):
            raise InvalidArgument(field, f"no module {module_name[:200]!r} in {where[:200]!r}, "
                                  f"where {import_path[:200]!r} is looked for")
        raise PermissionDenied(f"{field}: module {top!r} is not a file or package in "
                               f"{where[:200]!r}; this controller runs only code from its "
                               "allowed working dirs, not installed packages")

    def _check_file(self, field: str, shown: str, real: str) -> None:
        """A file the import runs (a real path in the working dir) is neither
        the standard library, nor outside the roots, nor installed code."""
        if is_stdlib_file(real):
            raise PermissionDenied(f"{field}: {shown} is the standard library's "
                                   f"{real[:200]!r}, not user code")
        if "/" in self.working_dir_roots:
            return
        roots = [r for r in self.working_dir_roots if below(real, r)]
        if not roots:  # the controller's own directory, outside the roots
            raise PermissionDenied(f"{field}: {shown} is {real[:200]!r}, outside the "
                                   "directories this controller runs code from "
                                   "(--allow-working-dir)")
        # From the outermost root down: a working dir may be a virtualenv's
        # site-packages, or lie in one.
        installed = package_dir(real, min(roots, key=len))
        if installed is not None and not any(below(real, d) for d in self.packages_below):
            raise PermissionDenied(f"{field}: {shown} is installed code (in "
                                   f"{installed[:200]!r}), not the working dir's own: name "
                                   "the directory with --allow-packages-below to allow it")

    @staticmethod
    def _check_walk(field: str, shown: str, source: str, module_name: str,
                    attribute: str) -> None:
        """The path does not start at what the module imports, as far as its
        source tells: a module (`import asyncio`) never; a name from the
        standard library or servefleet (`from subprocess import Popen`) never;
        a name from another package not to walk on from it. (Such a name
        itself may be a value the module serves, a FastAPI app made
        elsewhere, or a class of elsewhere: which, the import-time check
        tells.)"""
        bindings = import_bindings(source, module_name.partition(".")[0])
        first, _, rest = attribute.partition(".")
        if bindings is None or first not in bindings:
            return
        origin = bindings[first]
        if origin is None:
            raise PermissionDenied(f"{field}: {shown} walks through {first!r}, a module "
                                   f"{module_name!r} imports: an import path names what the "
                                   "module defines")
        if rest or refused_name(origin, "") is not None:
            raise PermissionDenied(f"{field}: {shown} starts at {first!r}, which "
                                   f"{module_name!r} imports from {origin[:200]!r}: an import "
                                   "path names what the module defines")

    def check_deployment(self, field: str, spec: pb.DeploymentSpec) -> None:
        """Every part of a deployment spec the policy bounds: its runtime, its
        import path and gRPC servicer functions (imported by its replicas),
        and its custom autoscaling policy (run on this host)."""
        where = spec.runtime.working_dir
        self.check(f"{field}.runtime", spec.runtime)
        self.check_by_value(field, spec)
        if not spec.by_value.target:  # by value, the import path is a name only
            self.check_import(f"{field}.import_path", spec.import_path, where)
        for i, path in enumerate(spec.grpc_servicer_functions):
            self.check_import(f"{field}.grpc_servicer_functions[{i}]", path, where)
        policy = spec.replica_config.autoscaling_config.policy
        if policy:
            field = f"{field}.replica_config.autoscaling_config.policy"
            self.check_import(field, policy, where, on_host=self.runs_user_code)
            if not self.runs_user_code:
                raise FailedPrecondition(
                    f"{field}: this controller runs no user code (--runtime none), and a "
                    "custom autoscaling policy runs in a process on its host: leave it out "
                    "(the built-in policy decides), or give the controller a runtime")

    def check_by_value(self, field: str, spec: pb.DeploymentSpec) -> None:
        """PermissionDenied naming --allow-code-by-value when the spec carries
        pickles and this controller does not run code by value."""
        part = "target" if spec.by_value.target else "init_args" \
            if spec.by_value.init_args else None
        if part is not None and not self.allow_code_by_value:
            raise PermissionDenied(
                f"{field}.by_value.{part}: this controller does not run code sent by value "
                "(pickled by servefleet.run from a script or notebook); start it with "
                "--allow-code-by-value, or deploy code by import path from a module in "
                "the working dir")

    def check_application(self, field: str, spec: apb.ApplicationSpec) -> None:
        """The same for an application. Its builder and gRPC servicer
        functions are imported by the build, on this host whatever the
        runtime; so are its overrides' custom policies. (That an application
        cannot be built under --runtime none, goals/applications.py says.)"""
        where, here = spec.runtime.working_dir, self.runs_user_code
        self.check(f"{field}.runtime", spec.runtime)
        self.check_import(f"{field}.import_path", spec.import_path, where, on_host=here)
        for i, path in enumerate(spec.grpc_servicer_functions):
            self.check_import(f"{field}.grpc_servicer_functions[{i}]", path, where, on_host=here)
        for i, override in enumerate(spec.deployments):
            self.check(f"{field}.deployments[{i}].runtime", override.runtime)
            policy = override.replica_config.autoscaling_config.policy
            if policy:
                self.check_import(f"{field}.deployments[{i}].replica_config.autoscaling_config"
                                  ".policy", policy, override.runtime.working_dir or where,
                                  on_host=here)

    def describe(self) -> str:
        dirs = ", ".join(self.working_dir_roots) or "none"
        strict = self.code_on_host and "/" not in self.working_dir_roots
        imports = "the working dir only" if strict else "anywhere but the standard library"
        runs = "builds and custom policies here" if self.runs_user_code else \
            "no user code here (--runtime none)"
        return (f"working dirs below: {dirs}; images: {', '.join(self.image_patterns)}; "
                f"runtime.env {'allowed' if self.allow_env else 'refused'}; "
                f"import paths from {imports}; {runs}; code by value "
                f"{'allowed' if self.allow_code_by_value else 'refused'}")

    def check(self, field: str, runtime: pb.RuntimeOptions) -> None:
        """PermissionDenied naming `field`.<part> when `runtime` breaks the policy."""
        if runtime.working_dir:
            real = os.path.realpath(runtime.working_dir)
            if not any(real == root or real.startswith(root.rstrip("/") + "/")
                       for root in self.working_dir_roots):
                allowed = ", ".join(self.working_dir_roots) or "none (this controller takes " \
                    "no working dirs)"
                raise PermissionDenied(
                    f"{field}.working_dir: {runtime.working_dir[:200]!r} is outside the "
                    f"directories this controller runs code from (--allow-working-dir): "
                    f"{allowed}")
        if runtime.image and not any(fnmatch.fnmatchcase(runtime.image, p)
                                     for p in self.image_patterns):
            raise PermissionDenied(
                f"{field}.image: {runtime.image[:200]!r} matches no allowed image pattern "
                f"(--allow-image): {', '.join(self.image_patterns)}")
        if runtime.env and not self.allow_env:
            raise PermissionDenied(f"{field}.env: this controller does not let a deploy set "
                                   "environment variables (--allow-env)")
