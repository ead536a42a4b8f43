"""The zygote: one process with the replica's modules imported, forking replicas.

`python -m servefleet.replica.zygote --state-dir DIR` imports what every
replica imports (uvicorn, starlette, grpc, protobuf, servefleet.replica), then
serves fork requests on the UNIX socket DIR/zygote-<its pid>.sock (wire.ZYGOTE_SOCKET),
one JSON line each: {"args": [replica flags], "env": {...}, "cwd": "...",
"log": "path", "identity": {...}}. It answers {"pid": N} or {"error": "..."}.
A forked replica skips the interpreter start and those imports (about half
of a replica's start; bench/replicas.py), and is
otherwise what `python -m servefleet.replica ARGS` is: in a session of its
own, with the given environment, working directory and log.

A forked child keeps the zygote's command line, so the process runtime finds
its identity in DIR/procs/<pid>.json, written here before the answer, and
its exit code in DIR/procs/<pid>.exit, written when it is reaped. The zygote
never starts gRPC, threads or an event loop, so forking it is safe; it exits
when the process that started it (the controller) is gone. Its replicas stay.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import servefleet.replica.main as replica_main
from servefleet._private.wire import ZYGOTE_PROCS_DIR, ZYGOTE_SOCKET


def _start_time(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()[19]


def _child(request: dict[str, Any], listener: socket.socket, conn: socket.socket) -> None:
    """In the forked child: become the replica (never returns)."""
    code = 1
    try:
        listener.close()
        conn.close()
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        with open(os.devnull, "rb") as null:
            os.dup2(null.fileno(), 0)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["servefleet.replica", *request["args"]]
        code = replica_main.main(request["args"])  # exits the process itself
    finally:
        os._exit(code)


def _reap(procs: Path) -> None:
    """Collect exited replicas and record their exit codes."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        with contextlib.suppress(OSError):
            (procs / f"{pid}.exit").write_text(str(os.waitstatus_to_exitcode(status)))


def _fork(request: dict[str, Any], procs: Path, listener: socket.socket,
          conn: socket.socket) -> int:
    pid = os.fork()
    if pid == 0:
        _child(request, listener, conn)
    identity = {**request["identity"], "pid": pid, "start_time": _start_time(pid)}
    (procs / f"{pid}.json").write_text(json.dumps(identity))
    return pid


def serve(state_dir: Path, parent: int) -> None:
    """Fork replicas on request until `parent` (the controller) is gone."""
    procs = state_dir / ZYGOTE_PROCS_DIR
    procs.mkdir(parents=True, exist_ok=True)
    name = ZYGOTE_SOCKET.format(pid=os.getpid())
    path = state_dir / name
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    # Reaped at once, so the exit code is on record by the time the runtime
    # sees the process gone.
    signal.signal(signal.SIGCHLD, lambda signum, frame: _reap(procs))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound under a short name in its own directory: a socket path may not
    # exceed 107 bytes, and runtime directories can be deep.
    os.chdir(state_dir)
    listener.bind(name)
    os.chmod(path, 0o600)
    listener.listen(64)
    listener.settimeout(0.2)
    while os.getppid() == parent:
        _reap(procs)
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(5)
            try:
                request = json.loads(conn.makefile("rb").readline())
                reply: dict[str, Any] = {"pid": _fork(request, procs, listener, conn)}
            except Exception as e:  # a bad request or a failed fork: the caller falls back
                reply = {"error": f"{type(e).__name__}: {e}"}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode() + b"\n")
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(prog="servefleet-zygote")
    parser.add_argument("--state-dir", required=True)
    # The controller's pid, from the controller itself: one killed while this
    # process was still importing has made it a child of init already, and a
    # zygote that took init for its parent served an empty directory forever.
    parser.add_argument("--parent-pid", type=int, default=0)
    args = parser.parse_args()
    serve(Path(args.state_dir), args.parent_pid or os.getppid())


if __name__ == "__main__":
    main()
