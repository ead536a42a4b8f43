"""A local run's replica output on the terminal of the script that started it
(Ray's `log_to_driver`).

    (default/Model Model-1a2b3c4d pid=4242) loading weights
    (default/Model Model-1a2b3c4d pid=4242) 2026-12-07 12:05:41,352 INFO servefleet.replica: ...

The process runtime writes each replica's stdout and stderr, as one stream,
to a file in its runtime directory (process.py: `replica_outputs`).
`ReplicaEcho`, a thread of the driver, every POLL_S:

1. opens each replica's file it has not seen yet, once;
2. names its replica (`scan`: application, deployment, pid) for the prefix;
   a file stays unread until then, at most NAME_WAIT_S (a replica that
   exited at once is shown under its id alone);
3. writes each new complete line, prefixed, to the driver's stderr;
4. closes a file once the controller has removed it (after the replica
   stopped) and it is read to its end.

An open file outlives its removal, so the lines a replica printed just
before it was stopped (a request's, right before the script ends) are read
all the same: `stop()`, called once the replicas are stopped, ends the
thread, then reads every file to its end. One reader at a time, each byte
read once: no line is shown twice.

Why the files and not the controller's GetLogs stream (`servefleet logs
-f`): that polls, and forgets a replica once its files are cleaned up, so a
replica's last lines could be lost; and the driver runs on the same machine
as these files by construction. Why stderr for both streams: the runtime
keeps them as one (in the order written, which `servefleet logs` shows), and
the script's stdout stays its own output.

SERVEFLEET_LOG_TO_DRIVER=0 turns it off (`enabled()`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from servefleet.controller.runtime.process import replica_outputs, scan

logger = logging.getLogger(__name__)
ENV = "SERVEFLEET_LOG_TO_DRIVER"
_ON = ("", "1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")
POLL_S = 0.1
# How long a replica's first lines wait for its name (its process may not
# be found yet, between fork and exec); after that its id alone is shown.
NAME_WAIT_S = 2.0
_READ = 1 << 20


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether replicas' output goes to this process's stderr (SERVEFLEET_LOG_TO_DRIVER:
    1, the default, or 0). ValueError naming the variable for another value."""
    value = (os.environ if environ is None else environ).get(ENV, "").strip().lower()
    if value in _ON or value in _OFF:
        return value in _ON
    raise ValueError(f"{ENV}={value!r}: 1 (replicas' output on this process's stderr, "
                     "the default) or 0 (not shown)")


def names_of(runtime_dir: str, cluster: str) -> dict[str, str]:
    """The prefix of each running replica of `cluster` started from `runtime_dir`."""
    directory = Path(runtime_dir).resolve() / cluster
    return {replica.replica_id: (f"({replica.application}/{replica.deployment} "
                                 f"{replica.replica_id} pid={replica.handle.split(':')[0]})")
            for replica, settings in scan(cluster) if Path(settings).parent == directory}


class _Output:
    """One replica's file, open, and what of it was read but not yet shown."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.found = time.monotonic()
        self.prefix = ""
        self.partial = b""

    def lines(self, final: bool) -> list[str]:
        """The complete lines written since the last call; with `final`, the
        unfinished last one too."""
        data = self.partial
        while chunk := os.read(self.fd, _READ):
            data += chunk
        end = data.rfind(b"\n") + 1
        if final or (not end and len(data) >= _READ):
            end = len(data)  # a line longer than a read is shown in pieces, not held
        self.partial = data[end:]
        text = data[:end].decode(errors="replace").removesuffix("\n")
        # Lines as the file has them: a progress bar's \r stays inside its line.
        return [line.removesuffix("\r") for line in text.split("\n")] if end else []

    def removed(self) -> bool:
        return os.fstat(self.fd).st_nlink == 0


class ReplicaEcho:
    """Shows the output of the replicas in `runtime_dir` on `write`'s stream
    (default: whatever sys.stderr is then), until `stop()`.

    `outputs` lists the replicas' files and `names` their prefixes (for tests;
    by default the process runtime's layout and its running replicas)."""

    def __init__(self, runtime_dir: str, cluster: str = "default",
                 write: Callable[[str], None] | None = None,
                 outputs: Callable[[], dict[str, Path]] | None = None,
                 names: Callable[[], dict[str, str]] | None = None) -> None:
        self._write = write or _to_stderr
        self._list = outputs or (lambda: replica_outputs(runtime_dir, cluster))
        self._names = names or (lambda: names_of(runtime_dir, cluster))
        self._open: dict[str, _Output] = {}
        self._lock = threading.Lock()  # one reader at a time: no byte read twice
        self._stopping = threading.Event()
        self._stopped = False
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="servefleet-replica-echo",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(POLL_S):
            try:
                with self._lock:
                    if self._stopping.is_set():
                        return  # stop() has read, or is reading, everything
                    self._poll(final=False)
            except Exception:  # the next poll tries again; the driver goes on
                if not self._failed:  # once: not ten times a second
                    logger.exception("showing replicas' output failed")
                self._failed = True

    def _poll(self, final: bool) -> None:
        for replica_id, path in self._list().items():
            if replica_id not in self._open:
                with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                    self._open[replica_id] = _Output(path)
        unnamed = [r for r, out in self._open.items() if not out.prefix]
        names = self._names() if unnamed else {}
        for replica_id, out in list(self._open.items()):
            out.prefix = out.prefix or names.get(replica_id, "")
            if not out.prefix and (final or time.monotonic() - out.found > NAME_WAIT_S):
                out.prefix = f"({replica_id})"
            if not out.prefix:
                continue  # its name first
            gone = out.removed()  # before the read: a removed file gets nothing new
            lines = out.lines(final or gone)
            if lines:  # written at once: read is shown, whatever fails next
                self._write("".join(f"{out.prefix} {line}\n" for line in lines))
            if gone or final:
                os.close(out.fd)
                del self._open[replica_id]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Show what the replicas wrote up to now and stop; idempotent. Call it
        once they are stopped: lines written later are not shown."""
        self._stopping.set()
        self._thread.join(timeout_s)
        with self._lock:
            if self._stopped:
                return  # a file read again from its start would show its lines twice
            self._stopped = True
            with contextlib.suppress(OSError):
                self._poll(final=True)
            for out in self._open.values():
                os.close(out.fd)
            self._open.clear()


def _to_stderr(text: str) -> None:
    stream = sys.stderr
    if stream is None:  # pythonw, or a daemon that closed it
        return
    with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to show
        stream.write(text)
        stream.flush()
