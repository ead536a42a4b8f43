"""servefleet: a model-serving control plane.

The Python SDK lives here (`servefleet.client`), with the CLI
(`servefleet.cli`) and the generated API (`servefleet.v1`). The services are
`servefleet.controller`, `servefleet.proxy` and `servefleet.replica`, kept in
the repository's top-level controller/, proxy/ and replica/ folders.
"""

__version__ = "0.1.0"

from servefleet.api import Application, Deployment, deployment
from servefleet.batching import batch
from servefleet.handle import DeploymentHandle, get_deployment_handle
from servefleet.local import local_url, run, shutdown
from servefleet.multiplex import get_multiplexed_model_id, multiplexed
from servefleet.responses import DeploymentResponse, DeploymentResponseGenerator, HandleError

__all__ = ["Application", "Deployment", "DeploymentHandle", "DeploymentResponse",
           "DeploymentResponseGenerator", "HandleError", "batch", "deployment",
           "get_deployment_handle", "get_multiplexed_model_id", "local_url", "multiplexed",
           "run", "shutdown"]
