"""`servefleet.serve.handle`: Ray Serve's handle classes, which are
servefleet's (servefleet/_private/handle.py and responses.py): a handle a replica
gets among its init args is an instance of these."""

from servefleet._private.handle import DeploymentHandle
from servefleet._private.responses import DeploymentResponse, DeploymentResponseGenerator

__all__ = ["DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator"]
