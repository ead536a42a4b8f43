"""`servefleet up [CONFIG]`: a whole servefleet on this machine, in the foreground.

1. start a controller on the embedded store (sqlite, process runtime) and a
   proxy, each in its own session so that Ctrl-C reaches only this command,
   and print their logs prefixed with their name;
2. deploy CONFIG, if given, and report progress until it is RUNNING (or
   failed), then say what to curl;
3. on Ctrl-C or SIGTERM (or when a child dies): Shutdown, which deletes every
   application and waits for the replicas to stop, then the controller exits;
   stop the proxy; and, as a last resort, kill any replica still running from
   this runtime directory. Nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

from servefleet.client import ControllerClient, ControllerError
from servefleet.config_file import ConfigError, load_config

from .apps import CommandFailed, wait_running

CONTROLLER_EXIT_TIMEOUT_S = 90.0
DEFAULT_HTTP = "127.0.0.1:8000"


def _pump(name: str, stream, out: Callable[[str], None]) -> None:
    for line in stream:
        out(f"{name:<10}| {line.rstrip()}")


class Cluster:
    """The child processes of one `up`."""

    def __init__(self, store: str, listen: str, http: str, runtime_dir: str) -> None:
        self.listen, self.http, self.runtime_dir = listen, http, runtime_dir
        self._lock = threading.Lock()
        python = [sys.executable, "-m", "servefleet"]
        self.controller = self._spawn("controller", [
            *python, "controller", "--store", store, "--listen", listen,
            "--runtime-dir", runtime_dir])
        # The request timeout comes from the config's http_options, through the
        # route table, so a later deploy can change it.
        self.proxy = self._spawn("proxy", [*python, "proxy", "--controller", listen,
                                           "--listen", http])

    def say(self, line: str) -> None:
        with self._lock:
            print(line, flush=True)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        threading.Thread(target=_pump, args=(name, proc.stdout, self.say), daemon=True).start()
        return proc

    def died(self) -> str | None:
        for name, proc in (("controller", self.controller), ("proxy", self.proxy)):
            if proc.poll() is not None:
                return f"the {name} exited with code {proc.returncode}"
        return None

    def stop(self) -> None:
        self.say("up        | stopping: deleting every application, then stopping the "
                 "controller and the proxy")
        if self.controller.poll() is None:
            try:
                with ControllerClient(self.listen, timeout=5) as client:
                    client.shutdown()
            except ControllerError as e:
                self.say(f"up        | shutdown failed ({e.details}); stopping the controller")
                self.controller.terminate()
        _wait_or_kill(self.controller, CONTROLLER_EXIT_TIMEOUT_S)
        if self.proxy.poll() is None:
            self.proxy.terminate()
        _wait_or_kill(self.proxy, 30)
        for pid in self._leftover_replicas():
            self.say(f"up        | killing leftover replica process {pid}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    def _leftover_replicas(self) -> list[int]:
        from servefleet.controller.runtime.process import scan

        runtime_dir = os.path.realpath(self.runtime_dir)  # as the process runtime sees it
        return [int(replica.handle.split(":")[0]) for replica, settings in scan("default")
                if os.path.realpath(settings).startswith(runtime_dir + os.sep)]


def _wait_or_kill(proc: subprocess.Popen, timeout_s: float) -> None:
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def cmd_up(args: argparse.Namespace) -> int:
    request = None
    if args.config:
        try:
            request = load_config(args.config)
        except ConfigError as e:
            raise CommandFailed(str(e)) from None
    http = args.http
    if http is None and request is not None and request.http_options.port:
        http = f"{request.http_options.host or '127.0.0.1'}:{request.http_options.port}"
    http = http or DEFAULT_HTTP
    state_dir = os.path.expanduser(args.state_dir)
    os.makedirs(state_dir, exist_ok=True)
    store = args.store or f"sqlite://{os.path.join(state_dir, 'state.db')}"

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    cluster = Cluster(store, args.listen, http, os.path.join(state_dir, "runtime"))
    try:
        if not _start(cluster, request, args, stop):
            return 1
        while not stop.wait(0.5):
            problem = cluster.died()
            if problem:
                cluster.say(f"up        | {problem}; stopping")
                return 1
        return 0
    finally:
        cluster.stop()


def _start(cluster: Cluster, request, args: argparse.Namespace, stop: threading.Event) -> bool:
    """Deploy the config once the controller leads; False if that failed."""
    with ControllerClient(cluster.listen, timeout=30) as client:
        try:
            leader = client.status().leader
        except ControllerError as e:
            cluster.say(f"up        | the controller did not come up: {e.details}")
            return False
        problem = cluster.died()
        if problem or leader != cluster.listen:
            # Another servefleet answers there (a port taken): never deploy to it.
            cluster.say(f"up        | {problem or 'another controller leads at ' + leader}; "
                        f"is another servefleet running on {cluster.listen}?")
            return False
        if request is None:
            cluster.say(f"up        | ready, nothing deployed: servefleet deploy CONFIG "
                        f"(controller {cluster.listen}, proxy http://{cluster.http})")
            return True
        client.call("DeployApplications", request)
        try:
            wait_running(client, [a.name for a in request.applications], args.wait_timeout,
                         lambda line: cluster.say(f"up        | {line}"),
                         lambda: "stopped" if stop.is_set() else cluster.died())
        except CommandFailed as e:
            cluster.say(f"up        | {e}")
            return False
    cluster.say("up        | ready. Try:")
    for app in request.applications:
        if not app.no_route:
            route = app.route_prefix if app.HasField("route_prefix") else "/"
            cluster.say(f"up        |   curl http://{cluster.http}{route}")
    cluster.say("up        | Ctrl-C stops everything.")
    return True


def add_command(commands) -> None:
    up = commands.add_parser("up", help="run a controller, a proxy and a config, in the "
                                        "foreground")
    up.add_argument("config", nargs="?", metavar="CONFIG", help="YAML config file to deploy")
    up.add_argument("--store", default=None, metavar="URL",
                    help="store URL (default: sqlite in --state-dir)")
    up.add_argument("--http", default=None, metavar="HOST:PORT",
                    help="where the proxy listens (default: the config's http_options, "
                         f"else {DEFAULT_HTTP})")
    up.add_argument("--listen", default="127.0.0.1:7373", metavar="HOST:PORT",
                    help="where the controller listens (default %(default)s)")
    up.add_argument("--state-dir", default="~/.servefleet", metavar="DIR",
                    help="the sqlite store and replica logs (default %(default)s)")
    up.add_argument("--wait-timeout", type=float, default=300.0, metavar="S")
    up.set_defaults(run=cmd_up)
