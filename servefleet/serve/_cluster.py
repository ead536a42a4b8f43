"""Finding the cluster `servefleet.serve` talks to, and what it knows.

Ray Serve talks to "the" Serve instance of the Ray cluster. servefleet's
equivalent, in order:

1. inside a replica, the controllers that replica follows
   (servefleet._private.replica_context);
2. the embedded cluster `serve.run` / `serve.start` started in this process
   (servefleet._private.local.embedded);
3. the controllers named by $SERVEFLEET_CONTROLLER, for a script that works
   with a cluster started elsewhere (`servefleet up`).

`ingress_of` answers which deployment of an application is its ingress,
which GetStatus does not say: a run from this process recorded it; an
application deployed from a config file lists its deployments ingress
first; otherwise the deployment with the HTTP route, or the only one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from servefleet._private import replica_context
from servefleet._private.local import embedded as local
from servefleet.client import ControllerClient

from .exceptions import RayServeException

_lock = threading.Lock()
# Application -> ingress deployment, for applications this process ran.
_ingress: dict[str, str] = {}


def controllers() -> list[str] | None:
    """The controllers to talk to, or None when no servefleet is known."""
    identity = replica_context.current()
    if identity is not None and identity.controllers:
        return list(identity.controllers)
    try:
        return [local.controller_address()]
    except RuntimeError:
        pass
    named = os.environ.get("SERVEFLEET_CONTROLLER", "")
    return [a.strip() for a in named.split(",") if a.strip()] or None


def require_controllers(what: str) -> list[str]:
    found = controllers()
    if found is None:
        raise RayServeException(f"{what}: no servefleet is running: call serve.run() or "
                                "serve.start() first, or set SERVEFLEET_CONTROLLER to a "
                                "cluster's controller address")
    return found


def remember_ingress(application: str, deployment: str) -> None:
    with _lock:
        _ingress[application] = deployment


def forget(application: str | None = None) -> None:
    """Forget one application's ingress (all with None)."""
    with _lock:
        if application is None:
            _ingress.clear()
        else:
            _ingress.pop(application, None)


def deployments_of(client: ControllerClient, application: str) -> list[str] | None:
    """The deployments GetStatus shows for `application`, or None when it
    shows no such application."""
    for app in client.status().applications:
        if app.name == application:
            return [d.name for d in app.deployments]
    return None


def ingress_of(client: ControllerClient, application: str,
               deployments: Sequence[str]) -> str | None:
    """The ingress deployment of `application` (whose deployments are
    `deployments`), or None when it cannot be told."""
    with _lock:
        recorded = _ingress.get(application)
    if recorded in deployments:
        return recorded
    for record in client.applications().applications:
        if record.spec.name == application and record.deployment_names:
            return record.deployment_names[0]
    routed = [r.spec.name for r in client.list(application=application)
              if r.spec.HasField("route_prefix")]
    if len(routed) == 1:
        return routed[0]
    return deployments[0] if len(deployments) == 1 else None
