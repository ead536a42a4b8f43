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
- `import_path` names user code, never the standard library's (a deployment
  `subprocess:Popen` with init args would run any command). Unless the roots
  allow everything (`--allow-working-dir /`), its top-level module must also
  be a file or package in the spec's working dir (the controller's directory
  when it names none), so installed packages cannot be borrowed either. With
  `--docker-code image` the code is inside the image, which --allow-image
  vouches for: only the standard-library rule applies.

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

from servefleet.v1 import deployment_pb2 as pb

from ..errors import InvalidArgument, PermissionDenied


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

    @classmethod
    def build(cls, *, loopback: bool, cwd: str, default_image: str,
              working_dirs: Sequence[str] = (), images: Sequence[str] = (),
              allow_env: bool | None = None, code_on_host: bool = True) -> DeployPolicy:
        """The policy from the flags, with the defaults described above."""
        roots = working_dirs or ([cwd] if loopback else [])
        return cls(tuple(os.path.realpath(r) for r in roots),
                   tuple(images) or (default_image,),
                   loopback if allow_env is None else allow_env, code_on_host,
                   os.path.realpath(cwd))

    def check_import(self, field: str, import_path: str, working_dir: str) -> None:
        """PermissionDenied naming `field` when `import_path` is not user code;
        InvalidArgument when its module is found neither in the working dir
        nor installed."""
        top = import_path.partition(":")[0].partition(".")[0]
        if top in sys.stdlib_module_names or top in sys.builtin_module_names \
                or top in ("servefleet", "controller", "proxy", "replica"):
            raise PermissionDenied(f"{field}: {import_path[:200]!r} names the standard library "
                                   "or servefleet itself, not user code")
        if "/" in self.working_dir_roots or not self.code_on_host:
            return
        where = working_dir or self.cwd
        if importlib.machinery.PathFinder.find_spec(top, [where]) is None:
            if importlib.machinery.PathFinder.find_spec(top) is None:  # a typo, most likely
                raise InvalidArgument(field, f"no module {top!r} in {where[:200]!r}, where "
                                      f"{import_path[:200]!r} is looked for")
            raise PermissionDenied(f"{field}: module {top!r} is not a file or package in "
                                   f"{where[:200]!r}; this controller runs only code from its "
                                   "allowed working dirs, not installed packages")

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
