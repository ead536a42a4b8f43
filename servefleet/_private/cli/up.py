"""`servefleet up [CONFIG_OR_IMPORT_PATH]`: a whole servefleet on this machine, in the
foreground.

1. claim the state directory (a lock: one `up` per directory) and check
   that the controller's and the proxy's addresses are free; either failing
   is one line naming the flag that changes it, exit 2;
2. start a controller on the embedded store (sqlite, process runtime) and a
   proxy, each in its own session so that Ctrl-C reaches only this command,
   print their logs prefixed with their name, and wait until each says it
   listens (lifecycle.notify_ready). Only then is the address known to be
   this `up`'s own controller: nothing is ever deployed to, or shut down on,
   a controller that another process started;
3. deploy what TARGET names, if given: a config file or an import path
   (up_target.py); report progress until it is RUNNING, then say what to try,
   or, when it failed, why, tracebacks included (up_report.py);
4. on Ctrl-C or SIGTERM (or when a child dies): Shutdown, which deletes every
   application and waits for the replicas to stop, then the controller exits;
   stop the proxy; and, as a last resort, kill any replica still running from
   this runtime directory. Nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence

from servefleet._private import state_dir as state_dirs
from servefleet._private.configuration.config_file import grpc_listen_of
from servefleet._private.lifecycle import NOTIFY_ENV, can_bind, is_loopback
from servefleet._private.security.tls import Credentials
from servefleet._private.wire import DEFAULT_CONTROLLER, DEFAULT_HTTP
from servefleet.client import ControllerClient, ControllerError
from servefleet.proxy.haproxy import ENGINES

from . import helptext, security, up_report
from .apps import wait_running
from .errors import CommandFailed, UsageError
from .up_target import add_arguments as add_target_arguments
from .up_target import is_config_file, target_request

CONTROLLER_EXIT_TIMEOUT_S = 90.0
# How long the controller and the proxy may take to listen.
START_TIMEOUT_S = 60.0


def _pump(name: str, stream, out: Callable[[str], None]) -> None:
    for line in stream:
        out(f"{name:<10}| {line.rstrip()}")


@contextlib.contextmanager
def claim_state_dir(state_dir: str) -> Iterator[None]:
    """Hold the state directory's lock for as long as this `up` runs; UsageError
    if another `up` holds it (both would share one store and one runtime dir)."""
    path = os.path.join(state_dir, "up.lock")
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            raise UsageError(f"{state_dir} is in use by another servefleet up (pid {holder}); "
                             "stop it, or choose another directory with --state-dir") from None
        lock.truncate(0)
        lock.write(str(os.getpid()))
        lock.flush()
        yield


def check_free(addresses: Sequence[tuple[str, str]]) -> None:
    """UsageError naming every (address, flag) whose address is taken, in one message."""
    taken = [(address, flag) for address, flag in addresses if not can_bind(address)]
    if len(taken) == 1:
        address, flag = taken[0]
        raise UsageError(f"{address} is in use (another servefleet up?); "
                         f"choose another address with {flag}")
    if taken:
        raise UsageError("these addresses are in use (another servefleet up?): " + "; ".join(
            f"{address}: choose another with {flag}" for address, flag in taken))


class Cluster:
    """The child processes of one `up`."""

    def __init__(self, store: str, listen: str, http: str, runtime_dir: str,
                 controller_args: Sequence[str] = (), proxy_args: Sequence[str] = (),
                 credentials: Credentials | None = None) -> None:
        self.listen, self.http, self.runtime_dir = listen, http, runtime_dir
        # The proxy's gRPC ingress address, if it serves one (for the try-file).
        self.grpc: str | None = None
        # How this `up` calls its own controller (with --certs: the admin certificate).
        self.credentials = credentials or Credentials()
        self._lock = threading.Lock()
        # Set once the child said it listens: from then on, `listen` is ours.
        self.controller_ready = False
        self._notify: dict[str, socket.socket] = {}
        self._pumps: list[tuple[threading.Thread, subprocess.Popen]] = []
        python = [sys.executable, "-m", "servefleet"]
        self.controller = self._spawn("controller", [
            *python, "controller", "--store", store, "--listen", listen,
            "--runtime-dir", runtime_dir, *controller_args])
        # The request timeout comes from the config's http_options, through the
        # route table, so a later deploy can change it.
        self.proxy = self._spawn("proxy", [*python, "proxy", "--controller", listen,
                                           "--listen", http, *proxy_args])

    def say(self, line: str) -> None:
        with self._lock:
            print(line, flush=True)

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen:
        # The child's readiness arrives on a socket of its own (an abstract one:
        # no path to clean up, no length limit from a deep state dir).
        address = f"servefleet-up-{os.getpid()}-{name}-{uuid.uuid4().hex[:8]}"
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind("\0" + address)
        self._notify[name] = notify
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                env={**os.environ, NOTIFY_ENV: "@" + address})
        pump = threading.Thread(target=_pump, args=(name, proc.stdout, self.say), daemon=True)
        pump.start()
        self._pumps.append((pump, proc))
        return proc

    def wait_listening(self, stop: threading.Event,
                       timeout_s: float = START_TIMEOUT_S) -> str | None:
        """Wait until the controller and the proxy both listen; why not, if they do not."""
        waiting = dict(self._notify)
        deadline = time.monotonic() + timeout_s
        while waiting:
            problem = self.died() or ("stopped" if stop.is_set() else None)
            if problem:
                return problem
            if time.monotonic() > deadline:
                return f"the {' and the '.join(waiting)} did not listen within {timeout_s:g} s"
            readable, _, _ = select.select(list(waiting.values()), [], [], 0.2)
            for name, notify in list(waiting.items()):
                if notify in readable and b"READY=1" in notify.recv(4096).split(b"\n"):
                    del waiting[name]
                    self.controller_ready = self.controller_ready or name == "controller"
        return None

    def died(self) -> str | None:
        for name, proc in (("controller", self.controller), ("proxy", self.proxy)):
            if proc.poll() is not None:
                return f"the {name} exited with code {proc.returncode}"
        return None

    def stop(self) -> None:
        self.say("up        | stopping: deleting every application, then stopping the "
                 "controller and the proxy")
        for notify in self._notify.values():
            notify.close()
        if self.controller.poll() is None and not self.controller_ready:
            self.controller.terminate()  # not listening: whatever answers there is not ours
        elif self.controller.poll() is None:
            try:
                with ControllerClient(self.listen, timeout=5,
                                      credentials=self.credentials) as client:
                    client.shutdown()
            except ControllerError as e:
                self.say(f"up        | shutdown failed ({e.details}); stopping the controller")
                self.controller.terminate()
        _wait_or_kill(self.controller, CONTROLLER_EXIT_TIMEOUT_S)
        if self.proxy.poll() is None:
            self.proxy.terminate()
        _wait_or_kill(self.proxy, 30)
        for pump, proc in self._pumps:  # their last lines, then the pipes
            pump.join(5)
            if proc.stdout is not None:
                proc.stdout.close()
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
    if args.try_file and not os.path.isfile(args.try_file):
        raise UsageError(f"--try-file {args.try_file}: no such file")
    if not 1 <= args.proxy_workers <= 64:
        raise UsageError("--proxy-workers: between 1 and 64")
    if args.proxy_engine == "haproxy" and args.proxy_workers > 1:
        raise UsageError("--proxy-workers is for the python engine (HAProxy runs threads)")
    request = target_request(args)
    config = args.target if is_config_file(args.target) else None
    http = args.http
    if http is None and request is not None and request.http_options.port:
        http = f"{request.http_options.host or '127.0.0.1'}:{request.http_options.port}"
    http = http or DEFAULT_HTTP
    grpc_listen = args.grpc or (grpc_listen_of(config) if config else None)
    state_dir = os.path.abspath(os.path.expanduser(args.state_dir))
    state_dirs.tag(state_dir)  # its files are not code, even inside a working dir
    store = args.store or f"sqlite://{os.path.join(state_dir, 'state.db')}"

    with claim_state_dir(state_dir):
        dashboard = None if args.dashboard == "off" else args.dashboard
        check_free([(args.listen, "--listen"),
                    (http, "--http" if args.http else "--http (or http_options.port in CONFIG)"),
                    *([(grpc_listen, "--grpc" if args.grpc else "grpc_options.port in CONFIG")]
                      if grpc_listen else []),
                    *([(dashboard, "--dashboard (or --dashboard off)")] if dashboard else [])])
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        tls = security.tls_files(args)
        certs = ["--certs", args.certs] if args.certs else []
        # The code `up` is asked to run: the config's directory, or the import
        # path's working dir, is allowed.
        code_dirs = {os.getcwd()}
        if config:
            code_dirs.add(os.path.dirname(os.path.abspath(config)))
        if args.working_dir:
            code_dirs.add(os.path.abspath(args.working_dir))
        metrics = ["--metrics-listen", dashboard] if dashboard else []
        cluster = Cluster(store, args.listen, http, os.path.join(state_dir, "runtime"),
                          [*certs, *metrics,
                           *(f"--allow-working-dir={d}" for d in sorted(code_dirs))],
                          [*certs, *(["--grpc-listen", grpc_listen] if grpc_listen else []),
                           *(["--workers", str(args.proxy_workers)]
                             if args.proxy_workers > 1 else []),
                           "--engine", args.proxy_engine,
                           *(f"--allow-router-module={m}" for m in args.allow_router_module)],
                          Credentials(tls))
        cluster.grpc = grpc_listen
        cluster.say(f"up        | {_security_line(tls is not None, args.listen)}")
        if grpc_listen:
            cluster.say(f"up        | gRPC ingress on {grpc_listen} (metadata 'application' "
                        "names the application)")
        if dashboard:
            cluster.say(f"up        | dashboard http://{dashboard}/-/dashboard, metrics "
                        f"http://{dashboard}/metrics (Prometheus: /-/metrics-targets)")
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
    """Deploy the config once our own controller listens and leads; False if that failed."""
    problem = cluster.wait_listening(stop)
    if problem:
        cluster.say(f"up        | {problem}")
        return False
    with ControllerClient(cluster.listen, timeout=30,
                          credentials=cluster.credentials) as client:
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
        names = [a.name for a in request.applications]
        try:
            wait_running(client, names, args.wait_timeout,
                         lambda line: cluster.say(f"up        | {line}"),
                         lambda: "stopped" if stop.is_set() else cluster.died())
        except CommandFailed as e:
            # Everything stops next: the errors in full, not where to look them up.
            try:
                lines = up_report.failures_in_full(client.status(), names)
            except ControllerError:
                lines = []
            for line in lines or str(e).splitlines():
                cluster.say(f"up        | {line}")
            return False
        tries = up_report.suggestions(request, cluster.http, args.try_file, cluster.grpc,
                                      up_report.ingress_specs(client, names))
    cluster.say("up        | ready. Try:")
    for line in tries:
        cluster.say(f"up        |   {line}")
    cluster.say("up        | Ctrl-C stops everything.")
    return True


def _security_line(tls: bool, listen: str) -> str:
    if tls:
        return "mutual TLS on every gRPC hop; clients need --certs DIR (or SERVEFLEET_CERTS)"
    where = "loopback only" if is_loopback(listen) else f"{listen}, NOT loopback"
    return (f"plain text, no authentication ({where}); for TLS: servefleet certs init DIR, "
            "then servefleet up --certs DIR")


def add_command(commands) -> None:
    up = helptext.add_command(
        commands, "up",
        help="run a controller, a proxy and a config (or an import path), in the foreground",
        description="Run a whole servefleet in the foreground: a controller on a sqlite "
                    "file in --state-dir, a proxy, and a config file or an import path (as "
                    "Ray Serve's `serve run`), with its progress until it is RUNNING. Ctrl-C "
                    "deletes everything and waits for the replicas to stop.",
        example=["servefleet up examples/config.yaml",
                 "servefleet up examples/config.yaml --try-file examples/try.txt",
                 "",
                 "# one application by import path; a builder function's args as KEY=VALUE",
                 "servefleet up sentiment:app --working-dir examples",
                 "servefleet up hello:app_builder message=hi",
                 "",
                 "# a second one beside the first: its own ports and state dir",
                 "servefleet up examples/digits/config.yaml --http 127.0.0.1:8100 "
                 "--listen 127.0.0.1:7474 --state-dir /tmp/servefleet-2 --dashboard off"])
    up.add_argument("--store", default=None, metavar="URL",
                    help="store URL (default: sqlite in --state-dir)")
    up.add_argument("--http", default=None, metavar="HOST:PORT",
                    help="where the proxy listens (default: the config's http_options, "
                         f"else {DEFAULT_HTTP})")
    up.add_argument("--listen", default=DEFAULT_CONTROLLER, metavar="HOST:PORT",
                    help="where the controller listens (default %(default)s)")
    up.add_argument("--grpc", default=None, metavar="HOST:PORT",
                    help="where the proxy serves gRPC ingress (default: the config's "
                         "grpc_options.port, else nowhere)")
    up.add_argument("--proxy-workers", type=int, default=1, metavar="N",
                    help="proxy processes sharing the HTTP port (servefleet proxy "
                         "--workers; default 1)")
    up.add_argument("--proxy-engine", choices=ENGINES, default="python",
                    help="who serves the proxy's HTTP port: the Python proxy or HAProxy "
                         "driven by it (servefleet proxy --engine; docs/guides/haproxy.md; "
                         "default python)")
    up.add_argument("--allow-router-module", action="append", default=[], metavar="MODULE",
                    help="the proxy's --allow-router-module: deployments may route with "
                         "RequestRouter classes of this module or package (repeatable; "
                         "docs/routing.md)")
    up.add_argument("--state-dir", default="~/.servefleet", metavar="DIR",
                    help="the sqlite store and replica logs (default %(default)s)")
    up.add_argument("--wait-timeout", type=float, default=300.0, metavar="S",
                    help="seconds the applications may take to be RUNNING (default "
                         "%(default)s)")
    up.add_argument("--try-file", default=None, metavar="FILE",
                    help="once ready, print the commands in FILE (one a line, {http} is the "
                         "proxy's address, {grpc} its gRPC port's) instead of one curl per "
                         "route")
    up.add_argument("--dashboard", default="127.0.0.1:8265", metavar="HOST:PORT",
                    help="where the controller serves its dashboard and /metrics "
                         "(default %(default)s; `off`: nowhere)")
    up.add_argument("--certs", default=None, metavar="DIR",
                    help="mutual TLS from `servefleet certs init DIR` for the controller, "
                         "the proxy and the replicas")
    add_target_arguments(up)
    up.set_defaults(run=cmd_up, tls_role="admin", cluster_ca=None, cluster_cert=None,
                    cluster_key=None)
