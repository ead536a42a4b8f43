"""`servefleet.serve.exceptions`: Ray Serve's exception names.

A Ray program catches these by name (`except BackPressureError`), so each
one is a class here. The ones a handle call raises are also `HandleError`s
(servefleet/_private/responses.py): code written for servefleet catches them the
same way, and `from_handle_error` turns a plain `HandleError` into the
one a Ray program expects (503 "overloaded" -> BackPressureError, 503 "no
replica took it" -> DeploymentUnavailableError); the handle code calls it
where it raises, so both kinds of program see one exception.
"""

from __future__ import annotations

import asyncio

from servefleet._private.responses import HandleError

__all__ = ["BackPressureError", "DeploymentUnavailableError", "RayServeException",
           "RequestCancelledError", "from_handle_error"]


class RayServeException(Exception):
    """The base of Ray Serve's errors: misuse of the API (no such application,
    a call outside a replica that needs one) and failed handle calls."""


class BackPressureError(RayServeException, HandleError):
    """A handle call was refused because the deployment's callers already
    hold `max_queued_requests` requests waiting for a replica."""

    def __init__(self, message: str = "", *, num_queued_requests: int = -1,
                 max_queued_requests: int = -1) -> None:
        if not message:
            message = (f"request dropped due to backpressure (num_queued_requests="
                       f"{num_queued_requests}, max_queued_requests={max_queued_requests})")
        HandleError.__init__(self, message, 503)
        self.num_queued_requests = num_queued_requests
        self.max_queued_requests = max_queued_requests

    @property
    def message(self) -> str:
        return str(self)


class DeploymentUnavailableError(RayServeException, HandleError):
    """The deployment cannot take requests: it failed to deploy, or none of
    its replicas took the call."""

    def __init__(self, message: str = "", deployment_id: object = None) -> None:
        if not message:
            message = f"{deployment_id} is unavailable because it failed to deploy"
        HandleError.__init__(self, message, 503)
        self.deployment_id = deployment_id

    @property
    def message(self) -> str:
        return str(self)


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
