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
  library's (a deployment `subprocess:Popen` with init args would run any
  command). Unless the roots allow everything (`--allow-working-dir /`), its
  module must also be a file or package in the spec's working dir (the
  controller's directory when it names none), so installed packages cannot
  be borrowed either. Where the module is found in the working dir, whatever
  the roots: its real file (links followed) must lie in the working dir, not
  in a virtualenv or site-packages below it (unless `--allow-packages-below`
  names that directory), and the path after the colon may not start at a
  name the module binds by `import` (user_modules.py). Replicas, builds and
  policy runners check the walk again when they import (servefleet/user_code.py).
  With `--docker-code image` the code is inside the image, which
  --allow-image vouches for: only the standard-library rule applies.

A spec outside the policy is refused with PERMISSION_DENIED naming the field
and the rule, before anything is written to the store; an import_path whose
module exists nowhere (a typo) is INVALID_ARGUMENT naming the module and the
directory searched.
"""

from __future__ import annotations

import fnmatch
import importlib.machinery
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as pb

from ..errors import InvalidArgument, PermissionDenied
from .user_modules import imported_names, module_file, package_dir


@dataclass(frozen=True)
class DeployPolicy:
    # Real paths; a working dir must be one of them or below one. Empty: none allowed.
    working_dir_roots: tuple[str, ...] = ("/",)
    # fnmatch patterns for runtime.image. Empty: no image may be named.
    image_patterns: tuple[str, ...] = ("*",)
    allow_env: bool = True
    # Whether user code is on this host (process runtime, Docker with mounted
    # working dirs): then import paths are checked against the files there.
    code_on_host: bool = True
    cwd: str = "/"
    # Real paths of virtualenvs or site-packages below a working dir whose
    # modules import paths may name (--allow-packages-below). Empty: none.
    packages_below: tuple[str, ...] = ()

    @classmethod
    def build(cls, *, loopback: bool, cwd: str, default_image: str,
              working_dirs: Sequence[str] = (), images: Sequence[str] = (),
              allow_env: bool | None = None, code_on_host: bool = True,
              packages_below: Sequence[str] = ()) -> DeployPolicy:
        """The policy from the flags, with the defaults described above."""
        roots = working_dirs or ([cwd] if loopback else [])
        return cls(tuple(os.path.realpath(r) for r in roots),
                   tuple(images) or (default_image,),
                   loopback if allow_env is None else allow_env, code_on_host,
                   os.path.realpath(cwd), tuple(os.path.realpath(d) for d in packages_below))

    def check_import(self, field: str, import_path: str, working_dir: str) -> None:
        """PermissionDenied naming `field` when `import_path` is not user code;
        InvalidArgument when its module is found neither in the working dir
        nor installed."""
        top = import_path.partition(":")[0].partition(".")[0]
        if top in sys.stdlib_module_names or top in sys.builtin_module_names \
                or top in ("servefleet", "controller", "proxy", "replica"):
            raise PermissionDenied(f"{field}: {import_path[:200]!r} names the standard library "
                                   "or servefleet itself, not user code")
        if not self.code_on_host:
            return  # in an image that --allow-image vouches for
        where = working_dir or self.cwd
        module_name, _, attribute = import_path.partition(":")
        found = module_file(module_name, where)
        if found is None:
            if "/" in self.working_dir_roots:
                return  # the operator trusts every directory, installed code included
            if (importlib.machinery.PathFinder.find_spec(top) is None  # a typo, most likely
                    or importlib.machinery.PathFinder.find_spec(top, [where]) is not None):
                raise InvalidArgument(field, f"no module {module_name[:200]!r} in "
                                      f"{where[:200]!r}, where {import_path[:200]!r} is "
                                      "looked for")
            raise PermissionDenied(f"{field}: module {top!r} is not a file or package in "
                                   f"{where[:200]!r}; this controller runs only code from its "
                                   "allowed working dirs, not installed packages")
        self._check_module_file(field, import_path, os.path.realpath(found), where)
        first = attribute.partition(".")[0]
        if first in imported_names(found):
            raise PermissionDenied(f"{field}: {import_path[:200]!r} walks through {first!r}, "
                                   f"a module {module_name!r} imports: an import path names "
                                   "what the module defines")

    def _check_module_file(self, field: str, import_path: str, real: str, where: str) -> None:
        """The module's real file (symlinks followed) lies in the working dir,
        and not in a virtualenv or site-packages below it unless allowed."""
        root = os.path.realpath(where)
        if not real.startswith(root + os.sep):
            raise PermissionDenied(f"{field}: {import_path[:200]!r} is found through a link "
                                   f"to {real[:200]!r}, outside the working dir")
        # Below the allowed root, the working dir itself included: a working
        # dir may be a virtualenv's site-packages. "/" trusts everything.
        allowed = [r for r in self.working_dir_roots
                   if r != "/" and (root == r or root.startswith(r.rstrip("/") + "/"))]
        installed = package_dir(real, min(allowed, key=len)) if allowed else None
        if installed is not None and not any(
                real.startswith(allowed.rstrip("/") + "/") for allowed in self.packages_below):
            raise PermissionDenied(f"{field}: {import_path[:200]!r} is installed code (in "
                                   f"{installed[:200]!r}), not the working dir's own: name "
                                   "the directory with --allow-packages-below to allow it")

    def check_deployment(self, field: str, spec: pb.DeploymentSpec) -> None:
        """Every part of a deployment spec the policy bounds: its runtime, its
        import path, gRPC servicer functions and custom autoscaling policy."""
        where = spec.runtime.working_dir
        self.check(f"{field}.runtime", spec.runtime)
        self.check_import(f"{field}.import_path", spec.import_path, where)
        for i, path in enumerate(spec.grpc_servicer_functions):
            self.check_import(f"{field}.grpc_servicer_functions[{i}]", path, where)
        policy = spec.replica_config.autoscaling_config.policy
        if policy:
            self.check_import(f"{field}.replica_config.autoscaling_config.policy", policy, where)

    def check_application(self, field: str, spec: apb.ApplicationSpec) -> None:
        """The same for an application: its builder, servicers and overrides."""
        where = spec.runtime.working_dir
        self.check(f"{field}.runtime", spec.runtime)
        self.check_import(f"{field}.import_path", spec.import_path, where)
        for i, path in enumerate(spec.grpc_servicer_functions):
            self.check_import(f"{field}.grpc_servicer_functions[{i}]", path, where)
        for i, override in enumerate(spec.deployments):
            self.check(f"{field}.deployments[{i}].runtime", override.runtime)
            policy = override.replica_config.autoscaling_config.policy
            if policy:
                self.check_import(f"{field}.deployments[{i}].replica_config.autoscaling_config"
                                  ".policy", policy, override.runtime.working_dir or where)

    def describe(self) -> str:
        dirs = ", ".join(self.working_dir_roots) or "none"
        strict = self.code_on_host and "/" not in self.working_dir_roots
        imports = "the working dir only" if strict else "anywhere but the standard library"
        return (f"working dirs below: {dirs}; images: {', '.join(self.image_patterns)}; "
                f"runtime.env {'allowed' if self.allow_env else 'refused'}; "
                f"import paths from {imports}")

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
