"""servefleet: a model-serving control plane.

What users import, each module with `__all__`:

- `servefleet`: deployments, applications, handles, `run` (this module);
- `servefleet.serve`: Ray Serve's API under its own names (the import swap);
- `servefleet.metrics`: metrics from user code;
- `servefleet.llm`: language models behind OpenAI's HTTP API;
- `servefleet.routing`: request routers (how callers choose a replica);
- `servefleet.client`: the controller's gRPC API from Python;
- `servefleet.v1`: the generated messages and stubs of that API (proto/).

Everything under `servefleet._private` is internal and may change in any
release. The services are `servefleet.controller`, `servefleet.proxy` and
`servefleet.replica`, kept in the repository's top-level controller/,
proxy/ and replica/ folders: programs to run (the `servefleet` command), not
libraries to import.
"""

__version__ = "0.1.0"

from servefleet._private.applications.api import Application, Deployment, deployment
from servefleet._private.batching.batch import batch
from servefleet._private.batching.multiplex import get_multiplexed_model_id, multiplexed
from servefleet._private.handle_errors import DeploymentUnavailableError, HandleError
from servefleet._private.handles.handle import DeploymentHandle, get_deployment_handle
from servefleet._private.handles.responses import DeploymentResponse, DeploymentResponseGenerator
from servefleet._private.local.embedded import local_url, run, shutdown

__all__ = ["Application", "Deployment", "DeploymentHandle", "DeploymentResponse",
           "DeploymentResponseGenerator", "DeploymentUnavailableError", "HandleError", "batch",
           "deployment", "get_deployment_handle", "get_multiplexed_model_id", "local_url",
           "multiplexed", "run", "shutdown"]
