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

A spec outside the policy is refused with PERMISSION_DENIED naming the field
and the rule, before anything is read from disk or written to the store.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass

from servefleet.v1 import deployment_pb2 as pb

from ..errors import PermissionDenied


@dataclass(frozen=True)
class DeployPolicy:
    # Real paths; a working dir must be one of them or below one. Empty: none allowed.
    working_dir_roots: tuple[str, ...] = ("/",)
    # fnmatch patterns for runtime.image. Empty: no image may be named.
    image_patterns: tuple[str, ...] = ("*",)
    allow_env: bool = True

    @classmethod
    def build(cls, *, loopback: bool, cwd: str, default_image: str,
              working_dirs: Sequence[str] = (), images: Sequence[str] = (),
              allow_env: bool | None = None) -> DeployPolicy:
        """The policy from the flags, with the defaults described above."""
        roots = working_dirs or ([cwd] if loopback else [])
        return cls(tuple(os.path.realpath(r) for r in roots),
                   tuple(images) or (default_image,),
                   loopback if allow_env is None else allow_env)

    def describe(self) -> str:
        dirs = ", ".join(self.working_dir_roots) or "none"
        return (f"working dirs below: {dirs}; images: {', '.join(self.image_patterns)}; "
                f"runtime.env {'allowed' if self.allow_env else 'refused'}")

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
