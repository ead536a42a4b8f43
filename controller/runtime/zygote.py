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
import subprocess
import sys
from pathlib import Path
from typing import Any

from servefleet.wire import ZYGOTE_PROCS_DIR, ZYGOTE_SOCKET

logger = logging.getLogger(__name__)
FORK_TIMEOUT_S = 5.0


class Zygote:
    def __init__(self, state_dir: Path) -> None:
        self._dir = state_dir
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def procs(self) -> Path:
        return self._dir / ZYGOTE_PROCS_DIR

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            return
        if self._proc is not None:
            logger.warning("the replica zygote exited with %s; starting another",
                           self._proc.returncode)
        self._dir.mkdir(parents=True, exist_ok=True)
        (self._dir / ZYGOTE_SOCKET).unlink(missing_ok=True)
        with open(self._dir / "zygote.log", "ab") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "servefleet.replica.zygote",
                 "--state-dir", str(self._dir)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    async def fork(self, request: dict[str, Any]) -> int | None:
        self._ensure_started()
        path = self._dir / ZYGOTE_SOCKET
        if not path.exists():
            return None  # still importing
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(str(path)), FORK_TIMEOUT_S)
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
