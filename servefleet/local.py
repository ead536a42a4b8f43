"""`servefleet.run` and `servefleet.shutdown`: an embedded servefleet, for
notebooks and tests (Ray Serve's `serve.run`).

    handle = servefleet.run(app, name="calc", route_prefix="/calc")
    print(await handle.remote(1), servefleet.local_url())
    servefleet.shutdown()

The first `run` starts a controller (sqlite in a temporary directory, the
process runtime) and a proxy (on `http_port`, or a free port) as child
processes of this one, as `servefleet up` does, and later runs reuse them.
`run` deploys the application's deployments (the graph `.bind()` made, with
the options in code), waits until every one is HEALTHY, and returns a handle
to the ingress. The deployments' code must live in a module the replicas can
import (not in `__main__`): its directory becomes their working dir.
`shutdown` deletes everything, stops the controller (after its replicas)
and the proxy, and removes the temporary directory. An interpreter that
exits without it stops them too.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from servefleet.api import Application, Deployment, graph_of
from servefleet.client import ControllerClient
from servefleet.handle import DeploymentHandle
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

_lock = threading.Lock()
_cluster: _Local | None = None


class _Local:
    """The controller and proxy of this process's embedded servefleet."""

    def __init__(self, http_port: int | None) -> None:
        from servefleet.cli.up import Cluster
        from servefleet.controller.runtime.process import free_port

        self.dir = tempfile.mkdtemp(prefix="servefleet-local-")
        self.controller_address = f"127.0.0.1:{free_port()}"
        self.http_address = f"127.0.0.1:{http_port or free_port()}"
        self.log = open(os.path.join(self.dir, "servefleet.log"), "a", buffering=1)
        log = self.log

        class Quiet(Cluster):
            def say(self, line: str) -> None:
                log.write(line + "\n")

        # Code of this process's own choosing runs: any working dir is allowed.
        self.cluster = Quiet(f"sqlite://{self.dir}/state.db", self.controller_address,
                             self.http_address, os.path.join(self.dir, "runtime"),
                             ["--allow-working-dir", "/"])
        problem = self.cluster.wait_listening(threading.Event())
        if problem:
            self.stop()
            raise RuntimeError(f"servefleet.run: {problem} (log: {self.log.name})")

    def stop(self) -> None:
        self.cluster.stop()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _working_dir(import_path: str) -> str:
    """The sys.path entry the module of `import_path` was imported from."""
    module_name = import_path.partition(":")[0]
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if module_name == "__main__" or not file:
        raise ValueError(f"{import_path}: deployments must be defined in a module the replicas "
                         "can import, not in __main__ or a notebook cell")
    path = Path(file).resolve().parent
    for _ in range(module_name.count(".") + file.endswith("__init__.py")):
        path = path.parent
    return str(path)


def _specs(app: Application | Deployment, name: str,
           route_prefix: str | None) -> list[dpb.DeploymentSpec]:
    from servefleet.controller.goals.app_specs import deployment_specs

    graph = graph_of(app)
    ingress = next(n for n in graph["deployments"] if n["name"] == graph["ingress"])
    spec = apb.ApplicationSpec(name=name, import_path=ingress["import_path"],
                               runtime=dpb.RuntimeOptions(
                                   working_dir=_working_dir(ingress["import_path"])))
    if route_prefix is None:
        spec.no_route = True
    else:
        spec.route_prefix = route_prefix
    return deployment_specs(spec, graph)


def run(app: Application | Deployment, *, name: str = "default", route_prefix: str | None = "/",
        blocking: bool = False, http_port: int | None = None,
        timeout_s: float = 120.0) -> DeploymentHandle:
    """Deploy `app` on this process's embedded servefleet (started on first use)
    and return a handle to its ingress once every deployment is HEALTHY."""
    global _cluster
    specs = _specs(app, name, route_prefix)
    with _lock:
        if _cluster is None:
            _cluster = _Local(http_port)
            atexit.register(shutdown)
        local = _cluster
    with ControllerClient(local.controller_address, timeout=30) as client:
        for spec in specs:
            client.deploy(spec)
        deadline = time.monotonic() + timeout_s
        while not _healthy(client, name, {s.name for s in specs}):
            if time.monotonic() > deadline:
                raise TimeoutError(f"servefleet.run: {name} was not HEALTHY within "
                                   f"{timeout_s:g} s (log: {local.log.name})")
            time.sleep(0.1)
    handle = DeploymentHandle(specs[0].name, name, [local.controller_address])
    if blocking:
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            shutdown()
    return handle


def _healthy(client: ControllerClient, application: str, names: set[str]) -> bool:
    for app in client.status().applications:
        if app.name == application:
            healthy = {d.name for d in app.deployments
                       if d.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY}
            return names <= healthy
    return False


def local_url() -> str:
    """The embedded proxy's base URL; RuntimeError when none runs."""
    if _cluster is None:
        raise RuntimeError("no embedded servefleet runs: call servefleet.run first")
    return f"http://{_cluster.http_address}"


def controller_address() -> str:
    """The embedded controller's address (for ControllerClient, the CLI's --controller)."""
    if _cluster is None:
        raise RuntimeError("no embedded servefleet runs: call servefleet.run first")
    return _cluster.controller_address


def shutdown() -> None:
    """Stop the embedded servefleet: every deployment, the controller, the proxy."""
    global _cluster
    with _lock:
        local, _cluster = _cluster, None
    if local is not None:
        with contextlib.suppress(Exception):
            local.stop()
