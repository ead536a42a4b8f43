"""`servefleet.serve.exceptions`: Ray Serve's exception names.

A Ray program catches these by name (`except BackPressureError`), so each
one is a class here. The ones a handle call raises (BackPressureError,
DeploymentUnavailableError: servefleet/_private/handle_errors.py says when)
are also `HandleError`s with `status` 503: code written for servefleet
catches them the same way. Raised by a deployment's code and not caught,
they are answered 503 (gRPC UNAVAILABLE) with their message, as Ray's are.
`from_handle_error` names a plain 503 `HandleError` by its text.
"""

from __future__ import annotations

import asyncio

from servefleet._private.handle_errors import (
    BackPressureError,
    DeploymentUnavailableError,
    RayServeException,
)
from servefleet._private.responses import HandleError

__all__ = ["BackPressureError", "DeploymentUnavailableError", "RayServeException",
           "RequestCancelledError", "from_handle_error"]


class RequestCancelledError(RayServeException, asyncio.CancelledError):
    """The request was cancelled (`response.cancel()`, or its caller left).
    A CancelledError too, so asyncio code that lets cancellation through
    keeps doing so."""

    def __init__(self, request_id: str | None = None) -> None:
        super().__init__(request_id)
        self.request_id = request_id

    def __str__(self) -> str:
        if self.request_id:
            return f"request {self.request_id} was cancelled"
        return "request was cancelled"


def from_handle_error(error: HandleError) -> HandleError:
    """The Ray-named error for a plain HandleError (the error itself when
    no Ray name fits: the target raised, or the replica failed)."""
    if type(error) is not HandleError or error.status != 503:
        return error
    text = str(error)
    if "overloaded" in text:
        out: HandleError = BackPressureError(text)
    else:
        out = DeploymentUnavailableError(text)
    out.__cause__ = error.__cause__
    return out
