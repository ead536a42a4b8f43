"""`servefleet.serve.handle`: Ray Serve's handle classes, which are
servefleet's (servefleet/handle.py and responses.py): a handle a replica
gets among its init args is an instance of these."""

from servefleet.handle import DeploymentHandle
from servefleet.responses import DeploymentResponse, DeploymentResponseGenerator

__all__ = ["DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator"]
