"""The cluster's processes: started detached (a session of their own, output
to run/logs/NAME.log), each recorded in run/pids.json with its start time so
that stop kills those processes and no other that reused a pid; and the
nodes' cgroups: each node's kubelet, containerd, shims and Pods run in a
cgroup tree of its own (/sfk8s-NODE in every cgroup v1 hierarchy), so
killing a node is killing every process in that tree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from .layout import RUN

PIDS = RUN / "pids.json"
LOGS = RUN.parent / "logs"  # kept after a stop, for a look; emptied by the next start
CGROUP_FS = Path("/sys/fs/cgroup")


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    # A zombie is dead (its parent, often init here, may reap it late).
    return None if fields[0] in ("Z", "X") else fields[19]


def _load() -> dict[str, list]:
    return json.loads(PIDS.read_text()) if PIDS.exists() else {}


def hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy mounted here (cgroup v2 has one: the root)."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        return [CGROUP_FS]
    return sorted(p for p in CGROUP_FS.iterdir()
                  if p.is_dir() and not p.is_symlink() and p.name != "unified")


def make_cgroup(path: str) -> None:
    """`path` (e.g. /sfk8s-node-a/runtime) in every hierarchy; cpuset's CPUs
    and memory nodes copied from the parent, as a new cpuset has none."""
    for top in hierarchies():
        here = top
        for part in path.strip("/").split("/"):
            parent, here = here, here / part
            here.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (here / name).exists() and not (here / name).read_text().strip():
                    (here / name).write_text((parent / name).read_text())


def _join(path: str) -> None:
    for top in hierarchies():
        (top / path.strip("/") / "cgroup.procs").write_text(str(os.getpid()))


def start(name: str, argv: list[str], *, netns: str | None = None, cgroup: str | None = None,
          env: dict[str, str] | None = None, pass_fds: tuple[int, ...] = ()) -> int:
    """Start `argv` detached in network namespace `netns` (and `cgroup`)."""
    LOGS.mkdir(parents=True, exist_ok=True)
    if netns:
        argv = ["nsenter", f"--net=/run/netns/{netns}", "--", *argv]
    if cgroup:
        make_cgroup(cgroup)
    with open(LOGS / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, env={**os.environ, **(env or {})},
                                pass_fds=pass_fds,
                                preexec_fn=(lambda: _join(cgroup)) if cgroup else None)
    pids = _load()
    pids[name] = [proc.pid, _start_time(proc.pid)]
    PIDS.write_text(json.dumps(pids, indent=1))
    return proc.pid


def alive(name: str) -> bool:
    pid, started = _load().get(name, (0, None))
    return bool(pid) and _start_time(pid) == started


def stop(names: list[str], timeout: float = 10.0) -> None:
    """SIGTERM to each recorded process of `names` that still runs, SIGKILL
    to those still running after `timeout`."""
    pids = _load()
    running = [(n, *pids[n]) for n in names if n in pids and alive(n)]
    for _, pid, _ in running:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_start_time(p) == s for _, p, s in running):
        time.sleep(0.1)
    for _, pid, started in running:
        if _start_time(pid) == started:
            os.kill(pid, signal.SIGKILL)
    for name in names:
        pids.pop(name, None)
    if PIDS.parent.exists():
        PIDS.write_text(json.dumps(pids, indent=1))


def forget(names: list[str]) -> None:
    """Drop the records of `names` (processes killed another way)."""
    pids = _load()
    for name in names:
        pids.pop(name, None)
    if PIDS.parent.exists():
        PIDS.write_text(json.dumps(pids, indent=1))


def cgroup_pids(path: str) -> set[int]:
    found: set[int] = set()
    for top in hierarchies():
        root = top / path.strip("/")
        if root.exists():
            for procs in root.rglob("cgroup.procs"):
                try:
                    found |= {int(p) for p in procs.read_text().split()}
                except OSError:
                    pass
    return found


def kill_cgroup(path: str, timeout: float = 10.0) -> None:
    """SIGKILL every process in cgroup tree `path` until none is left."""
    deadline = time.monotonic() + timeout
    while (left := cgroup_pids(path)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    if left:
        raise RuntimeError(f"processes of cgroup {path} still alive after SIGKILL: {sorted(left)}")


def remove_cgroup(path: str) -> None:
    """Remove cgroup tree `path` (empty by now), deepest first, from every
    hierarchy (runc makes its cgroups in the v2 one beside v1's too)."""
    for top in sorted(p for p in CGROUP_FS.iterdir() if p.is_dir() and not p.is_symlink()):
        root = top / path.strip("/")
        if not root.exists():
            continue
        for sub in sorted((p for p in root.rglob("*") if p.is_dir()),
                          key=lambda p: len(p.parts), reverse=True):
            sub.rmdir()
        root.rmdir()
