"""`servefleet proxy --workers N`: N proxy processes sharing one port.

One Python process serves HTTP on one core. With N workers the kernel
spreads new connections over N processes that each bind the port with
SO_REUSEPORT; each is a whole proxy (its own Watch stream and load reports,
so the controller lists N proxies at one address).

This supervisor runs no proxy itself. It starts the workers (the same
command line, with SERVEFLEET_PROXY_WORKER=i), waits until each said it
listens (the sd_notify datagram every servefleet process sends), then says
so itself; forwards SIGTERM, SIGINT and SIGHUP to them; starts a worker
again when one dies; and exits when all have exited after a stop signal.

One metrics view: the workers keep their counters and histograms in
prometheus_client's multiprocess files (PROMETHEUS_MULTIPROC_DIR, a
directory this supervisor makes and removes), so /-/metrics on any worker
shows the sum over all of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence

from servefleet._private.lifecycle import NOTIFY_ENV, notify_ready

logger = logging.getLogger("servefleet.proxy")
WORKER_ENV = "SERVEFLEET_PROXY_WORKER"
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
# A worker that dies sooner than this after its start is not restarted in a
# tight loop: the supervisor waits this long first.
RESTART_DELAY_S = 1.0


def _end_with_parent() -> None:
    """In a worker before it runs: SIGTERM when the supervisor dies, even by
    SIGKILL (Linux's PR_SET_PDEATHSIG), so no worker outlives it."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def worker_index() -> int | None:
    """This process's worker number, or None when it is no worker."""
    value = os.environ.get(WORKER_ENV)
    return int(value) if value and value.isdigit() else None


class Supervisor:
    def __init__(self, argv: Sequence[str], count: int) -> None:
        self._argv = [sys.executable, "-m", "servefleet", *argv]
        self._count = count
        self._metrics_dir = tempfile.mkdtemp(prefix="servefleet-proxy-metrics-")
        self._notify_name = f"servefleet-proxy-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._notify.bind("\0" + self._notify_name)
        self._workers: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
        self._stopping = False

    def _spawn(self, index: int) -> None:
        env = {**os.environ, WORKER_ENV: str(index), METRICS_DIR_ENV: self._metrics_dir,
               NOTIFY_ENV: "@" + self._notify_name}
        proc = subprocess.Popen(self._argv, env=env, stdin=subprocess.DEVNULL,
                                preexec_fn=_end_with_parent)
        self._workers[index] = (proc, time.monotonic())
        logger.info("worker %d started (pid %d)", index, proc.pid)

    def _signal_all(self, signum: int) -> None:
        for proc, _ in self._workers.values():
            if proc.poll() is None:
                proc.send_signal(signum)

    def run(self) -> int:
        def on_stop(signum: int, _frame: object) -> None:
            self._stopping = True
            self._signal_all(signum)
        signal.signal(signal.SIGTERM, on_stop)
        signal.signal(signal.SIGINT, on_stop)
        signal.signal(signal.SIGHUP, lambda signum, _frame: self._signal_all(signum))
        try:
            for index in range(self._count):
                self._spawn(index)
            if not self._wait_ready():  # one could not start (its port taken, say)
                self._stopping = True
                self._signal_all(signal.SIGTERM)
                self._supervise()
                return 1
            return self._supervise()
        finally:
            self._notify.close()
            shutil.rmtree(self._metrics_dir, ignore_errors=True)

    def _wait_ready(self) -> bool:
        """True once every worker said it listens; False when one exited first."""
        ready = 0
        while ready < self._count and not self._stopping:
            if any(proc.poll() is not None for proc, _ in self._workers.values()):
                logger.error("a worker exited before it listened")
                return False
            readable, _, _ = select.select([self._notify], [], [], 0.2)
            if readable and b"READY=1" in self._notify.recv(4096).split(b"\n"):
                ready += 1
        notify_ready(f"proxy listening with {self._count} workers")
        return True

    def _supervise(self) -> int:
        from prometheus_client import multiprocess

        while True:
            for index, (proc, started) in list(self._workers.items()):
                if proc.poll() is None:
                    continue
                # Its live gauges leave the sum; its counters stay (they count what it did).
                multiprocess.mark_process_dead(proc.pid, self._metrics_dir)
                if self._stopping:
                    del self._workers[index]
                    continue
                logger.warning("worker %d (pid %d) exited with code %s; starting it again",
                               index, proc.pid, proc.returncode)
                time.sleep(max(0.0, started + RESTART_DELAY_S - time.monotonic()))
                self._spawn(index)
            if not self._workers:
                return 0
            time.sleep(0.2)
