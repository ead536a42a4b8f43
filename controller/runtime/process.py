"""The process runtime: each replica is a local child process in its own session.

`start_new_session` puts every replica in its own session and process group,
so it outlives the controller that started it (and a Ctrl-C aimed at the
controller does not reach it). Its identity is on its command line
(`python -m servefleet.replica --cluster C --replica-id R ...`), which is how
`list` finds the replicas of a cluster by reading /proc, whoever started them;
the cluster's runtime directory (where each replica's settings file lives) is
part of that identity, so controllers of one cluster must share it.

Replicas are forked by a zygote (zygote.py, replica/zygote.py) that has
their modules imported already, which halves a replica's start; until the
zygote is up, or if it fails, a replica starts as a new interpreter. A
forked replica carries the zygote's command line, so its identity is read
from `<runtime dir>/<cluster>/procs/<pid>.json` instead (checked against the
process's start time), and its exit code from `procs/<pid>.exit`.

The handle is "<pid>:<start time>", the start time (from /proc/<pid>/stat)
guarding against a reused pid. Ports are picked free on 127.0.0.1 just before
the start; the rare collision makes the replica exit with code 3, which the
controller treats as any failed start. Each replica's settings file and log
live in `<runtime dir>/<cluster>/`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from collections import deque
from pathlib import Path

from servefleet._private import state_dir
from servefleet._private.replica_command import MODULE, REPLICA_ENV, ReplicaCommand
from servefleet._private.security.hop_tls import replica_serves_tls
from servefleet._private.security.tls import TlsFiles
from servefleet._private.wire import ZYGOTE_PROCS_DIR

from .base import ReplicaLaunch, RuntimeReplica
from .sandbox import Sandbox, user_env
from .threads import thread_env
from .zygote import Zygote

logger = logging.getLogger(__name__)
# A forked replica gone from /proc but without its exit code yet: looked for
# this many times, this far apart (the zygote writes it right after reaping).
_REAP_POLLS = 10
_REAP_POLL_S = 0.02
# A replica's files in the runtime directory: <replica id><suffix>.
_SETTINGS = ".json"
_OUTPUT = ".log"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) from /proc/<pid>/stat; None when the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return fields[0], fields[19]


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat, or None when the process is gone or a zombie."""
    stat = _stat(pid)
    return stat[1] if stat is not None and stat[0] not in ("Z", "X") else None


def _signal_group(pid: int, signum: int) -> None:
    """Signal the replica's process group, which it leads; the replica alone if
    it leads none. Never both: a replica that saw SIGTERM twice took the second
    for an operator's "stop now" and exited under calls in flight."""
    try:
        os.killpg(pid, signum)
        return
    except (ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signum)


def _read_cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _forked_command(pid: int, argv: list[str]) -> ReplicaCommand | None:
    """The identity a zygote recorded for its child `pid` (whose command line
    is the zygote's), if the record is of this very process."""
    if "servefleet.replica.zygote" not in argv or "--state-dir" not in argv[:-1]:
        return None
    state_dir = argv[argv.index("--state-dir") + 1]
    try:
        recorded = json.loads((Path(state_dir) / ZYGOTE_PROCS_DIR / f"{pid}.json").read_text())
    except (OSError, ValueError):
        return None  # the zygote itself, or a record gone
    if recorded.get("start_time") != _start_time(pid):
        return None
    return ReplicaCommand.from_identity({k: str(v) for k, v in recorded.items()})


def scan(cluster: str) -> list[tuple[RuntimeReplica, str]]:
    """Every replica process of `cluster` on this host, with its settings file path."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        argv = _read_cmdline(pid)
        command = ReplicaCommand.parse(argv) or _forked_command(pid, argv)
        if command is None or command.cluster != cluster:
            continue
        started = _start_time(pid)
        if started is None:
            continue
        found.append((RuntimeReplica(
            replica_id=command.replica_id, cluster=cluster,
            application=command.application, deployment=command.deployment,
            version=command.version, handle=f"{pid}:{started}",
            control_address=command.address(command.control_port),
            http_address=command.address(command.http_port), http_tls=bool(command.http_tls),
            metrics_address=command.address(command.metrics_port),
            grpc_address=command.address(command.grpc_port)),
            command.config_file))
    return found


def replica_outputs(runtime_dir: str | Path, cluster: str) -> dict[str, Path]:
    """The file each replica of `cluster` started from `runtime_dir` writes its
    stdout and stderr to (both streams, in the order written), by replica id;
    a replica's file goes with its settings when the controller cleans up."""
    directory = Path(runtime_dir).resolve() / cluster
    try:
        names = set(os.listdir(directory))
    except OSError:
        return {}
    # The settings file tells a replica's output from the zygote's own log.
    return {name[:-len(_OUTPUT)]: directory / name for name in names
            if name.endswith(_OUTPUT) and name[:-len(_OUTPUT)] + _SETTINGS in names}


# Environment variables read when an interpreter starts (or a library loads):
# a replica whose runtime.env sets one is started as a new interpreter, not
# forked from the zygote, where they would be in os.environ and have no effect.
STARTUP_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_BIND_NOW", "MALLOC_ARENA_MAX",
                         "GRPC_ENABLE_FORK_SUPPORT", "GRPC_VERBOSITY", "GRPC_TRACE"})
STARTUP_ENV_PREFIXES = ("PYTHON",)


# What one read of a replica's log file takes at most.
READ_BYTES = 1 << 20


class ProcessRuntime:
    name = "process"

    def __init__(self, runtime_dir: str | Path, cluster: str, host: str = "127.0.0.1",
                 replica_tls: TlsFiles | None = None, sandbox: Sandbox | None = None,
                 http_tls: str = "auto") -> None:
        self._dir = Path(runtime_dir).resolve() / cluster
        self._host = host
        self._replica_tls = replica_tls
        self._http_tls = replica_serves_tls(http_tls, replica_tls, host)
        self._sandbox = sandbox or Sandbox()
        # Children this process started: polling them reaps their exit status.
        self._children: dict[int, subprocess.Popen] = {}
        self._zygote = Zygote(self._dir)
        self._forked: set[int] = set()  # replicas the zygote forked for this process

    def _home(self) -> Path:
        """A HOME for sandboxed replicas (caches of libraries such as torch's),
        theirs alone: the controller's own is not."""
        home = self._dir / "home"
        home.mkdir(mode=0o700, exist_ok=True)
        os.chown(home, self._sandbox.uid or 0, self._sandbox.gid or 0)
        return home

    def _paths(self, replica_id: str) -> tuple[Path, Path]:
        return self._dir / f"{replica_id}{_SETTINGS}", self._dir / f"{replica_id}{_OUTPUT}"

    async def start(self, launch: ReplicaLaunch) -> RuntimeReplica:
        state_dir.tag(self._dir.parent)  # not code, wherever it is (code_rules.py)
        # Settings hold the replica's token: only this user reads them (a
        # sandboxed replica reads its own before it drops to its user).
        # Settings and logs are this user's alone (0600); the directory is
        # traversable (0711) for the sandboxed replicas' HOME below it.
        self._dir.mkdir(mode=0o711, parents=True, exist_ok=True)
        settings_path, log_path = self._paths(launch.replica_id)
        settings = dict(launch.settings)
        if self._replica_tls is not None:
            settings["tls"] = self._replica_tls.as_dict()
        extra_env = {}
        if self._sandbox.uid is not None:
            settings["run_as"] = self._sandbox.run_as
            extra_env["HOME"] = str(self._home())
        fd = os.open(settings_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "w") as f:
            f.write(json.dumps(settings))
        command = ReplicaCommand(
            cluster=launch.cluster, application=launch.application,
            deployment=launch.deployment, replica_id=launch.replica_id,
            version=launch.version, host=self._host, control_port=free_port(self._host),
            http_port=free_port(self._host), metrics_port=free_port(self._host),
            grpc_port=free_port(self._host) if launch.serves_grpc else 0,
            http_tls=int(self._http_tls), config_file=str(settings_path))
        argv = [sys.executable, "-m", MODULE, *command.argv()]
        # Numeric libraries' threads, shared by the replicas on this host (threads.py).
        extra_env.update(thread_env(launch.env, float(launch.resources.get("num_cpus", 0)),
                                    os.cpu_count() or 1,
                                    len(self._children) + len(self._forked) + 1))
        # The controller's credentials are its own, not user code's.
        env = user_env({**REPLICA_ENV, **extra_env, **launch.env})
        cwd = launch.working_dir or os.getcwd()
        # A forked replica skips the interpreter's start, where these act.
        fork = not any(name in STARTUP_ENV or name.startswith(STARTUP_ENV_PREFIXES)
                       for name in launch.env)
        pid = await self._zygote.fork({"args": argv[3:], "env": env, "cwd": cwd,
                                       "log": str(log_path), "identity": command.identity()}
                                      ) if fork else None
        if pid is not None:
            self._forked.add(pid)
        else:
            with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
                      "ab") as log:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                        start_new_session=True)
            self._children[proc.pid] = proc
            pid = proc.pid
        handle = f"{pid}:{_start_time(pid) or ''}"
        logger.info("started replica %s as pid %d%s", launch.replica_id, pid,
                    " (forked)" if pid in self._forked else "")
        return RuntimeReplica(
            replica_id=launch.replica_id, cluster=launch.cluster,
            application=launch.application, deployment=launch.deployment,
            version=launch.version, handle=handle,
            control_address=command.address(command.control_port),
            http_address=command.address(command.http_port), http_tls=bool(command.http_tls),
            metrics_address=command.address(command.metrics_port),
            grpc_address=command.address(command.grpc_port))

    def _alive(self, handle: str) -> bool:
        pid_text, _, started = handle.partition(":")
        pid = int(pid_text)
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        stat = _stat(pid)
        if stat is not None and stat[0] == "Z" and pid in self._forked:
            # Exited, not yet reaped by the zygote: its exit code is on the way.
            return self._zygote.exit_code(pid) is None and stat[1] == started
        # Not our child: only the start time tells it from a process that reused the pid.
        current = _start_time(pid)
        return current is not None and bool(started) and current == started

    async def stop(self, handle: str, timeout_s: float) -> None:
        if not handle:
            return
        pid = int(handle.partition(":")[0])
        if not self._alive(handle):
            self._forget(pid)
            return
        # The replica leads its own process group (its own session): signal the
        # group, so processes the user's code started go too.
        _signal_group(pid, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._alive(handle) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if self._alive(handle):
            logger.warning("replica pid %d did not exit within %.1fs: killing it", pid, timeout_s)
            _signal_group(pid, signal.SIGKILL)
            while self._alive(handle):
                await asyncio.sleep(0.02)
        self._forget(pid)

    def _forget(self, pid: int) -> None:
        child = self._children.pop(pid, None)
        if child is not None:
            child.poll()
        self._forked.discard(pid)
        self._zygote.forget(pid)

    async def list(self, cluster: str) -> list[RuntimeReplica]:
        # The runtime directory scopes a cluster on this host: two independent
        # setups that happen to share a cluster name (two stores, two runtime
        # dirs) never see each other's replicas.
        return [r for r, settings in scan(cluster) if Path(settings).parent == self._dir]

    async def inspect(self, handle: str) -> RuntimeReplica | None:
        """Liveness and, for children of this process, the exit code."""
        if not handle:
            return None
        pid = int(handle.partition(":")[0])
        alive = self._alive(handle)
        child = self._children.get(pid)
        exit_code = None
        if not alive:
            exit_code = child.returncode if child is not None else self._zygote.exit_code(pid)
            for _ in range(_REAP_POLLS if exit_code is None and pid in self._forked else 0):
                # The zygote reaps (the pid leaves /proc), then writes the code:
                # a look in between would report an exit without its code.
                await asyncio.sleep(_REAP_POLL_S)
                if (exit_code := self._zygote.exit_code(pid)) is not None:
                    break
        return RuntimeReplica(replica_id="", cluster="", application="", deployment="",
                              version="", handle=handle, control_address="", http_address="",
                              alive=alive, exit_code=exit_code)

    def logs(self, replica_id: str, lines: int = 20) -> str:
        _, log_path = self._paths(replica_id)
        try:
            with open(log_path, errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError:
            return ""

    def read_logs(self, replica_id: str, cursor: str, lines: int) -> tuple[str, str]:
        """The cursor is a byte offset into the replica's log file."""
        _, log_path = self._paths(replica_id)
        try:
            with open(log_path, "rb") as f:
                if not cursor:
                    text = "".join(deque(io.TextIOWrapper(f, errors="replace"), maxlen=lines))
                    return text, str(log_path.stat().st_size)
                f.seek(int(cursor))
                data = f.read(READ_BYTES)
                # Up to the last complete line; the rest comes next time. A
                # line longer than one read comes in pieces (GetLogs cuts it
                # at 64 KiB anyway): waiting for its end would stop the follow.
                end = data.rfind(b"\n") + 1 or (len(data) if len(data) == READ_BYTES else 0)
                return data[:end].decode(errors="replace"), str(int(cursor) + end)
        except OSError:
            return "", cursor

    async def prune(self, cluster: str, keep: set[str]) -> builtins.list[str]:
        """Nothing to do: a dead process leaves only files, which cleanup() removes."""
        return []

    def close(self) -> None:
        self._zygote.close()

    def cleanup(self, replica_id: str) -> None:
        for path in self._paths(replica_id):
            with contextlib.suppress(OSError):
                path.unlink()
