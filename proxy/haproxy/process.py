"""The HAProxy child: start, seamless reload, drain, stop.

HAProxy runs in master-worker mode (`-W`) with its master CLI on a Unix
socket in a directory of its own. A reload (SIGUSR2 to the master) makes the
master read the configuration file again and start a new worker, which takes
the listening sockets over from the old one: no connection is refused. The
old worker finishes the requests it holds, streams and WebSockets included
(after `mworker-max-reloads` more reloads it is stopped), and exits. A
configuration the master cannot load leaves the old worker serving and
counts a failed reload (`show proc`), which `reload` reports.

The child dies with the proxy process, even when that is SIGKILLed
(PR_SET_PDEATHSIG, set by util-linux's setpriv), so no HAProxy outlives it.
One that dies is started again by engine.py. Its directory is removed when
the proxy stops, and, when the proxy was killed, by the next proxy process
that starts HAProxy on the host (`sweep_stale`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import glob
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from ..workers import _end_with_parent
from .cli import CliError, MasterCli

logger = logging.getLogger("servefleet.proxy.haproxy")
HAPROXY_ENV = "SERVEFLEET_HAPROXY"  # the haproxy binary, if not the one on PATH
START_TIMEOUT_S = 10.0
RELOAD_TIMEOUT_S = 10.0
_MASTER = re.compile(r"^\d+\s+master\s+(\d+)\s+\[failed:\s*(\d+)\]", re.M)
_PID = re.compile(r"^Pid:\s*(\d+)", re.M)
_WORKER = re.compile(r"^(\d+)\s+worker\s", re.M)
# What HAProxy says as a warning on every reload and stop.
_USUAL = ("stopped (cumulated", "exited with code 0", "Exiting Master", "All workers exited",
          "Stopping ", "Proxy <HTTPCLIENT>")


class HaproxyError(Exception):
    """HAProxy is missing, would not start, or refused a configuration."""


def binary() -> str:
    """The haproxy executable; HaproxyError saying what to install without it."""
    found = os.environ.get(HAPROXY_ENV) or shutil.which("haproxy")
    if not found:
        raise HaproxyError("--engine haproxy needs HAProxy 2.6 or later: "
                           "apt-get install haproxy (scripts/setup installs it)")
    return found


PREFIX = "servefleet-haproxy-"
# In each directory: the pid of the proxy process it is for, a file that
# process holds locked (flock) for as long as it lives.
OWNER = "owner"


def sweep_stale(parent: str) -> list[str]:
    """Remove the directories (configuration, sockets, certificate copy) that
    killed proxy processes left in `parent`: a SIGKILL runs no cleanup. A
    directory goes only when its owner file can be locked, i.e. no process
    holds it (whatever pid namespace it runs in) and it names its proxy: a
    proxy writes its pid only once it holds the lock, so an empty owner file
    is one being made (made, not locked yet). Those without an owner file
    are left alone too (one being made, or from an older build). The
    directories removed."""
    removed = []
    for path in glob.glob(os.path.join(parent, PREFIX + "*")):
        try:
            fd = os.open(os.path.join(path, OWNER), os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.read(fd, 32):
                continue  # being made: its proxy locks it next
        except OSError:
            continue  # its proxy lives
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


class HaproxyProcess:
    def __init__(self) -> None:
        sweep_stale(tempfile.gettempdir())
        self.directory = tempfile.mkdtemp(prefix=PREFIX)
        # Held open (and locked) until the directory goes: closing it frees the lock.
        self._owner = open(os.path.join(self.directory, OWNER), "w")
        fcntl.flock(self._owner, fcntl.LOCK_EX)
        self._owner.write(str(os.getpid()))
        self._owner.flush()
        self.config_path = os.path.join(self.directory, "haproxy.cfg")
        self.cli = MasterCli(os.path.join(self.directory, "master.sock"))
        self._proc: subprocess.Popen[bytes] | None = None

    async def start(self, config: str) -> None:
        """Start HAProxy on `config` and wait until its worker serves;
        HaproxyError when it cannot (the port is taken, say)."""
        command = [binary(), "-W", "-S", self.cli.socket_path, "-f", self.config_path]
        self._write(config)
        # The parent-death signal is set by setpriv, which then execs HAProxy:
        # a function run between fork and exec (preexec_fn) would make Python
        # fork where it can spawn, and this process has gRPC threads by now.
        setpriv = shutil.which("setpriv")
        self._proc = subprocess.Popen(
            [setpriv, "--pdeathsig", "TERM", "--", *command] if setpriv else command,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            preexec_fn=None if setpriv else _end_with_parent)
        threading.Thread(target=self._relay_output, args=(self._proc,), daemon=True,
                         name="haproxy-output").start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HaproxyError(f"HAProxy exited with code {self._proc.returncode} "
                                   "at its start (its messages are in the proxy's log)")
            try:
                if _PID.search(await self.cli.worker("show info")):
                    return
            except CliError:
                pass
            await asyncio.sleep(0.05)
        raise HaproxyError(f"HAProxy's worker did not start within {START_TIMEOUT_S:g}s")

    async def reload(self, config: str) -> None:
        """Serve `config` from a new worker, the listeners handed over;
        HaproxyError when the master refused it (the old worker serves on)."""
        before = await self._reloads()
        old_pid = await self.worker_pid()
        self._write(config)
        assert self._proc is not None
        self._proc.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + RELOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            if not self.running():
                raise HaproxyError("HAProxy exited during a reload")
            try:
                reloads = await self._reloads()
                if reloads[1] > before[1]:
                    raise HaproxyError("HAProxy refused the new configuration; the old "
                                       "one serves on (its messages are in the proxy's log)")
                if reloads[0] > before[0] and await self.worker_pid() not in (None, old_pid):
                    return
            except CliError:
                continue  # the master re-executes itself: its CLI comes back
        raise HaproxyError(f"HAProxy did not reload within {RELOAD_TIMEOUT_S:g}s")

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    async def worker_pid(self) -> int | None:
        found = _PID.search(await self.cli.worker("show info"))
        return int(found.group(1)) if found else None

    async def _reloads(self) -> tuple[int, int]:
        """(reloads, failed reloads) of the master."""
        found = _MASTER.search(await self.cli.master("show proc"))
        if found is None:
            raise CliError("no master line in show proc")
        return int(found.group(1)), int(found.group(2))

    async def stop(self, drain_timeout_s: float) -> None:
        """Stop listening, let the requests in flight finish (at most
        `drain_timeout_s`), then end HAProxy, idle client connections with
        it (a soft stop alone keeps those until their next request: option
        idle-close-on-response, for reloads). Idempotent."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            deadline = time.monotonic() + drain_timeout_s
            # A reload under way (the master executing itself again) would
            # miss the signal: wait for its CLI first.
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    await self._reloads()
                    break
                except CliError:
                    await asyncio.sleep(0.05)
            proc.send_signal(signal.SIGUSR1)  # soft stop: workers finish what they hold
            while proc.poll() is None and time.monotonic() < deadline:
                if await self._in_flight() == 0:
                    break  # what is left is idle connections
                await asyncio.sleep(0.05)
            if proc.poll() is None:
                proc.terminate()
                await asyncio.sleep(0.5)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
        self._owner.close()

    async def _in_flight(self) -> int | None:
        """Requests (and tunnels) the workers, old ones too, still hold on
        the HTTP port; None when the master does not answer."""
        try:
            workers = _WORKER.findall(await self.cli.master("show proc"))
        except CliError:
            return None
        held = 0
        for pid in workers:
            with contextlib.suppress(CliError):  # one that left meanwhile holds nothing
                held += (await self.cli.master(f"@!{pid} show sess")).count("fe=servefleet ")
        return held

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        shutil.rmtree(self.directory, ignore_errors=True)
        self._owner.close()

    def _write(self, config: str) -> None:
        temporary = self.config_path + ".new"
        with open(temporary, "w") as f:
            f.write(config)
        os.replace(temporary, self.config_path)

    @staticmethod
    def _relay_output(proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            text = line.decode(errors="replace").rstrip()
            if "[ALERT]" in text:
                logger.error("haproxy: %s", text)
            elif "[WARNING]" in text and not any(usual in text for usual in _USUAL):
                logger.warning("haproxy: %s", text)
            elif text:
                logger.debug("haproxy: %s", text)
