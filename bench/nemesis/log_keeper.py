"""Keeps every replica's log of a run for after it: the runtimes delete a
replica's log when its controller forgets the replica, and a failed
request's story is often in the log of a replica long gone. Every half
second, each new log file under the watched directories gets a hard link
in `keep`: the same file, which lives on after the runtime unlinks its
name and keeps what the replica appends."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path


class LogKeeper:
    def __init__(self, watched: list[Path], keep: Path) -> None:
        self.watched, self.keep = watched, keep
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-logs", daemon=True)

    def start(self) -> LogKeeper:
        self.keep.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sweep()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.sweep()

    def sweep(self) -> None:
        for directory in self.watched:
            for log in directory.rglob("*.log"):
                kept = self.keep / log.name
                if not kept.exists():
                    with contextlib.suppress(OSError):  # gone meanwhile, or another fs
                        os.link(log, kept)
