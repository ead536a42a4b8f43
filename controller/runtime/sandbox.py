"""How the controller starts processes that run user code on its own host.

Replicas (process runtime), application builds and custom autoscaling
policies all run code a deployer chose. None of them may act with the
controller's identity, so each is started:

- with an environment that holds none of the controller's credentials:
  `user_env` drops SERVEFLEET_TOKEN, SERVEFLEET_CERTS and the
  SERVEFLEET_CLUSTER_CA/_CERT/_KEY paths (and the etcd client's
  ETCDCTL_* settings), then adds the deployment's own `runtime.env`;
- in a session of its own (killing it kills what it started);
- as the user `Sandbox` says: an unprivileged user of its own when the
  controller runs as root, so that the controller's keys,
  token file and store cannot be opened from user code.
"""

from __future__ import annotations

import logging
import os
import pwd
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

# The controller's own credentials and settings that name them.
CREDENTIAL_VARS = frozenset({"SERVEFLEET_TOKEN", "SERVEFLEET_CERTS", "SERVEFLEET_CLUSTER_CA",
                             "SERVEFLEET_CLUSTER_CERT", "SERVEFLEET_CLUSTER_KEY"})
CREDENTIAL_PREFIXES = ("ETCDCTL_",)
# Who user code runs as by default when the controller is root: this user if
# the operator made one (useradd --system servefleet), else nobody.
DEFAULT_USER = "servefleet"
NOBODY = 65534
SETPRIV = "setpriv"  # util-linux, essential on Debian

logger = logging.getLogger(__name__)


def user_env(extra: Mapping[str, str] | None = None,
             base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without credentials, then `extra`."""
    source = os.environ if base is None else base
    env = {k: v for k, v in source.items()
           if k not in CREDENTIAL_VARS and not k.startswith(CREDENTIAL_PREFIXES)}
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class Sandbox:
    """The user and group user code runs as; None: the controller's own."""

    uid: int | None = None
    gid: int | None = None

    def wrap(self, argv: list[str]) -> list[str]:
        """`argv` run as this user: through util-linux's setpriv, which any
        subprocess API can start (uvloop's refuses Popen's user= and group=),
        with no supplementary groups."""
        if self.uid is None:
            return argv
        return [SETPRIV, f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups",
                "--", *argv]

    @property
    def run_as(self) -> str:
        """"UID:GID" for a replica's settings (replica/main.py drops to it), or ""."""
        return "" if self.uid is None else f"{self.uid}:{self.gid}"

    @classmethod
    def resolve(cls, setting: str, secured: bool) -> Sandbox:
        """The controller's --replica-user: "none" (user code runs as the
        controller's user), "auto" (the default: an unprivileged user when the
        controller runs as root and the cluster has TLS or tokens, whose keys
        and token file user code must then not read), or a user name or
        UID[:GID]. ValueError naming the flag for what cannot be."""
        if setting == "none" or (setting == "auto" and (os.geteuid() != 0 or not secured)):
            return cls()
        if os.geteuid() != 0:
            raise ValueError(f"--replica-user {setting}: only a controller running as root "
                             "can run user code as another user")
        if setting == "auto":
            try:
                entry = pwd.getpwnam(DEFAULT_USER)
            except KeyError:
                return cls(NOBODY, NOBODY)
            return cls(entry.pw_uid, entry.pw_gid)
        user, _, group = setting.partition(":")
        try:
            entry = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
            uid, gid = entry.pw_uid, entry.pw_gid
        except KeyError:
            if not user.isdigit():
                raise ValueError(f"--replica-user {setting}: no user {user!r}") from None
            uid = gid = int(user)  # a bare uid need not have a passwd entry
        if group:
            if not group.isdigit():
                raise ValueError(f"--replica-user {setting}: the group must be a number")
            gid = int(group)
        if uid == 0:
            raise ValueError(f"--replica-user {setting}: not root: that is what it is for")
        return cls(uid, gid)

    def problem(self) -> str:
        """Why user code cannot run as this user here ("" when it can): it must
        be able to start this interpreter and import servefleet (an interpreter
        under a home directory only its owner may enter cannot be)."""
        if self.uid is None:
            return ""
        try:
            subprocess.run(self.wrap([sys.executable, "-c", "import servefleet.replica.main"]),
                           cwd="/", env={"PATH": os.environ.get("PATH", "")},
                           capture_output=True, check=True, timeout=60)
        except subprocess.CalledProcessError as e:
            last = (e.stderr or b"").decode(errors="replace").strip().splitlines()[-1:]
            return (f"uid {self.uid} cannot import servefleet with {sys.executable}"
                    + (f": {last[0]}" if last else ""))
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"uid {self.uid} cannot run {sys.executable}: {e}"
        return ""


def tried(sandbox: Sandbox, setting: str) -> Sandbox:
    """`sandbox` (from --replica-user `setting`), tried once. "auto" that cannot
    work here (the interpreter is unreadable to that user) warns and runs user
    code as this controller's user; a user named outright is an error
    (ValueError naming the flag)."""
    problem = sandbox.problem()
    if not problem:
        if sandbox.uid is not None:
            logger.info("user code runs as uid %d, gid %d (--replica-user)", sandbox.uid,
                        sandbox.gid)
        return sandbox
    if setting != "auto":
        raise ValueError(f"--replica-user {setting}: {problem}")
    logger.warning("user code runs as this controller's user, and could read its keys and "
                   "token file: %s (make the interpreter and servefleet readable to it, or "
                   "set --replica-user)", problem)
    return Sandbox()
