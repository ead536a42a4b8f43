"""The process runtime's side of the zygote (replica/zygote.py).

`Zygote.fork` asks the zygote to fork one replica and returns its pid, or
None when the zygote cannot (not started yet, still importing, gone, or it
refused): the runtime then starts the replica as a new interpreter, as
before. The zygote is started on the first fork asked for, so a standby
controller never starts one, and again if it died.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from servefleet._private.replica_command import REPLICA_ENV
from servefleet._private.wire import ZYGOTE_PROCS_DIR, ZYGOTE_SOCKET

logger = logging.getLogger(__name__)
FORK_TIMEOUT_S = 5.0
RESTART_S = 10.0


def _socket_address(state_dir: Path, name: str) -> tuple[str, int | None]:
    """The socket's path, and the directory fd it goes through when the full
    path is too long for a socket address (/proc/self/fd/N/<name>)."""
    path = str(state_dir / name)
    if len(path.encode()) < 100:
        return path, None
    fd = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{fd}/{name}", fd


class Zygote:
    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0
        self._address: tuple[str, int | None] | None = None

    @property
    def procs(self) -> Path:
        return self._dir / ZYGOTE_PROCS_DIR

    def _ensure_started(self) -> bool:
        """Whether a zygote runs (started now if none does, at most every
        RESTART_S: one that keeps dying must not cost a process per replica)."""
        if self._proc is not None and self._proc.poll() is None:
            return True
        now = time.monotonic()
        if self._proc is not None:
            if now - self._started_at < RESTART_S:
                return False
            logger.warning("the replica zygote exited with %s (its log: %s); starting "
                           "another", self._proc.returncode, self._dir / "zygote.log")
        self._started_at = now
        self._forget_address()  # a new zygote listens under its own name
        self._dir.mkdir(parents=True, exist_ok=True)
        with open(self._dir / "zygote.log", "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "servefleet.replica.zygote",
                 "--state-dir", str(self._dir), "--parent-pid", str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **REPLICA_ENV})
        return True

    async def fork(self, request: dict[str, Any]) -> int | None:
        if not self._ensure_started() or not (self._dir / self._socket_name()).exists():
            return None  # not running, or still importing
        try:
            reader, writer = await asyncio.wait_for(self._connect(), FORK_TIMEOUT_S)
            try:
                writer.write(json.dumps(request).encode() + b"\n")
                await writer.drain()
                reply = json.loads(await asyncio.wait_for(reader.readline(), FORK_TIMEOUT_S))
            finally:
                writer.close()
        except (OSError, TimeoutError, ValueError) as e:
            logger.warning("the replica zygote did not answer (%s); starting a process", e)
            return None
        if "pid" not in reply:
            logger.warning("the replica zygote refused: %s", reply.get("error"))
            return None
        return int(reply["pid"])

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            if self._address is None:
                self._address = _socket_address(self._dir, self._socket_name())
            await asyncio.get_running_loop().sock_connect(sock, self._address[0])
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_unix_connection(sock=sock)

    def _socket_name(self) -> str:
        assert self._proc is not None
        return ZYGOTE_SOCKET.format(pid=self._proc.pid)

    def exit_code(self, pid: int) -> int | None:
        try:
            return int((self.procs / f"{pid}.exit").read_text())
        except (OSError, ValueError):
            return None

    def forget(self, pid: int) -> None:
        for suffix in (".json", ".exit"):
            (self.procs / f"{pid}{suffix}").unlink(missing_ok=True)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(5)
        self._forget_address()

    def _forget_address(self) -> None:
        if self._address is not None and self._address[1] is not None:
            os.close(self._address[1])
        self._address = None
