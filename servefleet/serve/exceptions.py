"""`servefleet.serve.exceptions`: Ray Serve's exception names.

A Ray program catches these by name (`except BackPressureError`), so each
one is a class here. The ones a handle call raises (BackPressureError,
DeploymentUnavailableError: servefleet/_private/handle_errors.py says when)
are also `HandleError`s with `status` 503: code written for servefleet
catches them the same way. Raised by a deployment's code and not caught,
they are answered 503 (gRPC UNAVAILABLE) with their message, as Ray's are.
`from_handle_error` names a plain 503 `HandleError` by its text.

They are defined in servefleet/_private/handle_errors.py, which the handles
raise them from: internal code never imports this compatibility layer.
"""

from __future__ import annotations

from servefleet._private.handle_errors import (
    BackPressureError,
    DeploymentUnavailableError,
    RayServeException,
    RequestCancelledError,
    from_handle_error,
)

__all__ = ["BackPressureError", "DeploymentUnavailableError", "RayServeException",
           "RequestCancelledError", "from_handle_error"]
