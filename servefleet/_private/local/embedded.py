"""`servefleet.run`, `start`, `delete` and `shutdown`: an embedded servefleet,
for scripts, notebooks and tests (Ray Serve's `serve.run`).

    handle = servefleet.run(app, name="calc", route_prefix="/calc")
    print(handle.remote(1).result(), servefleet.local_url())
    servefleet.shutdown()

`start` (or the first `run`) starts a controller (sqlite in a temporary
directory, the process runtime) and a proxy serving HTTP on
127.0.0.1:8000, as Ray Serve does, as child processes of this one; later
calls reuse them. A taken port is a RuntimeError naming it, before anything
starts. That controller runs code by value (--allow-code-by-value): it
listens on loopback and was started by this process, for this process's
code.

`run` deploys the application's deployments (local_specs.py: a class or
function defined in the script or notebook travels by value, pickled; the
script is never run again in a replica), replacing whatever application ran
under that name before, whatever its ingress; then it waits until every
deployment is HEALTHY and returns a handle to the ingress. `delete` removes
one application and waits until it is gone. `shutdown` deletes everything,
stops the controller (after its replicas) and the proxy, and removes the
temporary directory. An interpreter that exits without it stops them too.

The replicas' output (print() and log lines alike) goes to this process's
stderr as it is written, each line prefixed with its replica
(local_logs.py), as Ray's driver shows its actors'; `shutdown` shows the
last of it before it returns. SERVEFLEET_LOG_TO_DRIVER=0 (Ray's
`log_to_driver=False`) leaves it in the replicas' log files.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

from servefleet._private.actor_env import parent_of
from servefleet._private.applications.api import Application, Deployment
from servefleet._private.handles.handle import DeploymentHandle
from servefleet._private.handles.handle_router import close_routers
from servefleet._private.lifecycle import can_bind
from servefleet._private.local.specs import application_specs
from servefleet._private.security import tokens
from servefleet._private.security.tls import Credentials, hold_for
from servefleet.client import ControllerClient
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

logger = logging.getLogger(__name__)
DEFAULT_HTTP_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 8000

_lock = threading.Lock()
_cluster: _Local | None = None


class _Local:
    """The controller and proxy of this process's embedded servefleet."""

    def __init__(self, http_host: str, http_port: int) -> None:
        from servefleet._private.cli.up import Cluster
        from servefleet._private.local.logs import ReplicaEcho, enabled
        from servefleet.controller.runtime.process import free_port

        echo = enabled()  # a bad value is refused before anything starts
        self.echo: ReplicaEcho | None = None
        # Checked before anything starts: a proxy that cannot bind would say
        # so only in a log nobody reads.
        port = http_port or free_port(http_host)
        self.http_address = f"{http_host}:{port}"
        if not can_bind(self.http_address):
            raise RuntimeError(f"servefleet: cannot serve HTTP on {self.http_address}: port "
                               f"{port} is in use (another servefleet or Ray Serve?); stop "
                               "what listens there, or choose another port with "
                               "serve.start(http_options={'port': ...}) or "
                               "servefleet.run(..., http_port=...)")
        self.dir = tempfile.mkdtemp(prefix="servefleet-local-")
        self.controller_address = f"127.0.0.1:{free_port()}"
        self.log = open(os.path.join(self.dir, "servefleet.log"), "a", buffering=1)
        log = self.log

        class Quiet(Cluster):
            def say(self, line: str) -> None:
                log.write(line + "\n")

        # Code of this process's own choosing runs: any working dir, and code
        # by value (a script's classes), on a controller only it reaches. The
        # controller listens on loopback, where every local user could call
        # it: it takes tokens, and only this process holds the admin's (in
        # memory; the file is in a 0700 directory of this user's).
        tokens_file = os.path.join(self.dir, "tokens")
        admin = tokens.create(tokens_file, "servefleet-run", "admin")
        proxy = tokens.create(tokens_file, "servefleet-run-proxy", "proxy")
        self.credentials = Credentials(token=admin)
        hold_for([self.controller_address], self.credentials)
        runtime_dir = os.path.join(self.dir, "runtime")
        self.cluster = Quiet(f"sqlite://{self.dir}/state.db", self.controller_address,
                             self.http_address, runtime_dir,
                             ["--allow-working-dir", "/", "--allow-code-by-value",
                              "--auth-tokens", tokens_file,
                              # The caller's own code, run as the caller (as Ray's
                              # local cluster does): its files are readable.
                              "--replica-user", "none"], ["--token", proxy],
                             credentials=self.credentials)
        problem = self.cluster.wait_listening(threading.Event())
        if problem:
            self.stop()
            raise RuntimeError(f"servefleet: {problem} (log: {self.log.name})")
        if echo:
            self.echo = ReplicaEcho(runtime_dir)

    def client(self) -> ControllerClient:
        return ControllerClient(self.controller_address, timeout=30,
                                credentials=self.credentials)

    def stop(self) -> None:
        self.cluster.stop()
        if self.echo is not None:  # its replicas are stopped: their last lines
            self.echo.stop()
        hold_for([self.controller_address], None)
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def start(http_host: str = DEFAULT_HTTP_HOST, http_port: int = DEFAULT_HTTP_PORT) -> None:
    """Start this process's embedded servefleet, serving HTTP on
    `http_host:http_port` (port 0: a free one), unless one runs already (then
    its HTTP address stays; a different one asked for is logged as a warning).
    RuntimeError naming the port when it is taken; ValueError naming
    SERVEFLEET_LOG_TO_DRIVER when it is neither 1 nor 0."""
    _local(http_host, http_port)


def _local(http_host: str, http_port: int | None) -> _Local:
    global _cluster
    with _lock:
        if _cluster is None:
            _cluster = _Local(http_host, DEFAULT_HTTP_PORT if http_port is None else http_port)
            atexit.register(shutdown)
        elif http_port and _cluster.http_address != f"{http_host}:{http_port}":
            logger.warning("servefleet already serves HTTP on %s; %s:%s is ignored",
                           _cluster.http_address, http_host, http_port)
        return _cluster


def run(target: Application | Deployment, *, name: str = "default",
        route_prefix: str | None = None, blocking: bool = False,
        http_port: int | None = None, timeout_s: float = 120.0) -> DeploymentHandle:
    """Deploy `target` as application `name` on this process's embedded
    servefleet (started on first use, HTTP on 127.0.0.1:`http_port`, default
    8000) and return a handle to its ingress once every deployment is HEALTHY.

    `route_prefix`: where HTTP reaches the ingress; None: the ingress
    deployment's `route_prefix` option if it has one (None there: no HTTP
    route), else "/". An application already running under `name` is
    replaced. OptionError, ValueError or TypeError for what cannot be
    deployed, before anything is (ValueError too for a bad
    SERVEFLEET_LOG_TO_DRIVER, before anything starts); ControllerError when the controller refuses
    it; RuntimeError when a deployment fails to start; TimeoutError past
    `timeout_s`.
    """
    specs = application_specs(target, name, route_prefix)
    local = _local(DEFAULT_HTTP_HOST, http_port)
    with local.client() as client:
        versions = _replace(client, name, specs)

        def healthy(found: dict[str, status_pb2.DeploymentStatusInfo]) -> bool:
            return all(n in found and found[n].version == version
                       and found[n].status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
                       for n, version in versions.items())

        _wait(client, local, name, healthy, versions, timeout_s, "HEALTHY")
    handle = DeploymentHandle(specs[0].name, name, [local.controller_address])
    if blocking:
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            shutdown()
    return handle


def _replace(client: ControllerClient, name: str,
             specs: list[dpb.DeploymentSpec]) -> dict[str, str]:
    """Make `specs` application `name`'s deployments; their versions by name.

    The ingress is deployed last: the deployments that stay (now without a
    route) and the new ones first, then the old ones that go are deleted,
    which frees the route whichever of them held it, then the ingress takes
    it. A refusal of the first Deploy changes nothing. An old version's
    deployment-scoped actors stay while their deployment stays: its old
    replicas may call them until they are gone, and the controller deletes
    them then (controller/reconcile/actor_retirement.py).
    """
    ingress, rest = specs[0], specs[1:]
    versions = {spec.name: client.deploy(spec).version for spec in rest}
    wanted = {spec.name for spec in specs}
    stale = {record.spec.name for record in client.list(application=name)
             if record.spec.name not in wanted
             and parent_of(record.spec.runtime.env) not in wanted}
    if stale:
        client.delete(sorted(stale), application=name)
    versions[ingress.name] = client.deploy(ingress).version
    return versions


def _deployments(client: ControllerClient, application: str
                 ) -> dict[str, status_pb2.DeploymentStatusInfo]:
    for app in client.status().applications:
        if app.name == application:
            return {d.name: d for d in app.deployments}
    return {}


def _wait(client: ControllerClient, local: _Local, application: str,
          done: Callable[[dict[str, status_pb2.DeploymentStatusInfo]], bool],
          versions: dict[str, str], timeout_s: float, goal: str) -> None:
    """Poll the application's deployments until `done(them)`; RuntimeError as
    soon as one of `versions` failed to deploy at that version."""
    deadline = time.monotonic() + timeout_s
    while not done(found := _deployments(client, application)):
        for n, d in found.items():
            if (d.status == status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED
                    and versions.get(n) == d.version):
                raise RuntimeError(f"servefleet.run: deployment {application}/{n} failed to "
                                   f"deploy: {d.message} (log: {local.log.name})")
        if time.monotonic() > deadline:
            raise TimeoutError(f"servefleet: {application} was not {goal} within "
                               f"{timeout_s:g} s (log: {local.log.name})")
        time.sleep(0.1)


def delete(name: str, timeout_s: float = 60.0) -> None:
    """Delete application `name` of the embedded servefleet and wait until it is
    gone (its replicas stopped); nothing when no such application runs.
    RuntimeError when no embedded servefleet runs; TimeoutError past `timeout_s`."""
    local = _running()
    with local.client() as client:
        if any(app.spec.name == name for app in client.applications().applications):
            client.call("DeleteApplications", api.DeleteApplicationsRequest(names=[name]))
        names = _deployments(client, name)
        if names:
            client.delete(sorted(names), application=name)
        _wait(client, local, name, lambda found: not found, {}, timeout_s, "deleted")


def _running() -> _Local:
    if _cluster is None:
        raise RuntimeError("no embedded servefleet runs: call servefleet.run (or "
                           "servefleet._private.local.embedded.start) first")
    return _cluster


def local_url() -> str:
    """The embedded proxy's base URL; RuntimeError when none runs."""
    return f"http://{_running().http_address}"


def controller_address() -> str:
    """The embedded controller's address (for ControllerClient, the CLI's --controller)."""
    return _running().controller_address


def shutdown() -> None:
    """Stop the embedded servefleet: every deployment, the controller, the proxy."""
    global _cluster
    with _lock:
        local, _cluster = _cluster, None
    if local is not None:
        # Handles of this process to it would otherwise retry its dead controller.
        close_routers([local.controller_address])
        with contextlib.suppress(Exception):
            local.stop()
