"""`servefleet.serve.handle`: Ray Serve's handle classes, which are
servefleet's (servefleet/_private/handles/handle.py and responses.py): a handle a replica
gets among its init args is an instance of these."""

from servefleet._private.handles.handle import DeploymentHandle
from servefleet._private.handles.responses import DeploymentResponse, DeploymentResponseGenerator

__all__ = ["DeploymentHandle", "DeploymentResponse", "DeploymentResponseGenerator"]
