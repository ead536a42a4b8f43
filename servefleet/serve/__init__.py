"""`servefleet.serve`: Ray Serve's public Python API, under the same names.

A Ray Serve program runs on servefleet with its imports swapped:

    from servefleet import serve  # was: from ray import serve
    from servefleet.serve.handle import DeploymentHandle   # was: ray.serve.handle

and `import ray` / `ray.init()` dropped. The submodules are Ray's too:
`servefleet.serve.handle`, `.config`, `.schema`, `.exceptions`. Where
servefleet behaves differently from Ray (no object store, no placement
groups, one proxy per embedded cluster), the module that implements the
name says so. Everything else under servefleet.serve is internal.
"""

from typing import Any

# Ray Serve's import loads starlette's requests and responses, so its users'
# code annotates `starlette.requests.Request` after a bare `import starlette`
# (the names Ray's documentation writes); importing them here keeps that
# code working, in the driver and in a replica alike.
import starlette.requests
import starlette.responses  # noqa: F401

from servefleet._private.applications.api import Application, Deployment
from servefleet._private.batching.batch import batch
from servefleet._private.batching.multiplex import get_multiplexed_model_id, multiplexed

from . import config, context, exceptions, handle, metrics, schema
from ._actors import get_deployment_actor
from ._api import (
    delete,
    deployment,
    get_app_handle,
    get_deployment_handle,
    run,
    shutdown,
    start,
    status,
)
from ._context import ReplicaContext, get_replica_context
from .config import AutoscalingConfig, HTTPOptions, gRPCOptions
from .handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator


def ingress(app: Any) -> Any:
    """Wrap a deployment class around a FastAPI (or other ASGI) app, or a
    function building one (servefleet._private.applications.ingress)."""
    from servefleet._private.applications.ingress import ingress as make_ingress

    return make_ingress(app)


__all__ = ["Application", "AutoscalingConfig", "Deployment", "DeploymentHandle",
           "DeploymentResponse", "DeploymentResponseGenerator", "HTTPOptions",
           "ReplicaContext", "batch", "config", "context", "delete", "deployment",
           "exceptions", "gRPCOptions", "get_app_handle", "get_deployment_actor",
           "get_deployment_handle", "get_multiplexed_model_id", "get_replica_context",
           "handle", "ingress", "metrics", "multiplexed", "run", "schema", "shutdown",
           "start", "status"]
