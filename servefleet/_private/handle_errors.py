"""Why a handle call failed, under servefleet's name (`HandleError`) and the
names Ray Serve gives it.

A Ray program catches these by name (`except BackPressureError`); they are
also `HandleError`s with `status` 503, so code written for servefleet
catches them the same way. The handle raises them by what went
wrong (handle_router.py): BackPressureError when the callers' queue for the
deployment is full, DeploymentUnavailableError when no replica can take the
call; RequestCancelledError when the call was cancelled. Public as
`servefleet.serve.exceptions` (which re-exports them, with `RayServeException`
and `from_handle_error`), `servefleet.HandleError` and
`servefleet.DeploymentUnavailableError`. They live here, below both the
handles (responses.py raises them) and the Ray-compatibility layer, so
that internal code never imports `servefleet.serve` and a replica or a
plain `import servefleet` does not load Ray's API to know them. Imports
nothing of servefleet.

Raised by a deployment's code and not caught, both are answered as Ray
answers them (`unserved`): HTTP 503 with the message, gRPC UNAVAILABLE. The
deployment's callers see why it could not serve them, not "an error in
user code": the code did nothing wrong, the call it made could not be served.
"""

from __future__ import annotations

import asyncio


class HandleError(Exception):
    """A handle call failed: no replica could take it (overloaded, unknown,
    failed mid-call), the method does not exist, or what the target raised
    cannot be unpickled here (then the message carries its type and text)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


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
    """The deployment cannot take requests: it failed to deploy (DEPLOY_FAILED);
    no replica of it runs and its last start failed (the controller keeps
    retrying: the error is raised at once rather than after the retries);
    it asks for no replica; it was deleted while the call waited; or none of
    its replicas took the call. The message says which, with the last start
    error when there is one (`servefleet status APP` has all of it)."""

    def __init__(self, message: object = "", deployment_id: object = None) -> None:
        if not isinstance(message, str):  # Ray's signature: (deployment_id)
            message, deployment_id = "", message
        if not message:
            message = f"{deployment_id} is unavailable because it failed to deploy"
        HandleError.__init__(self, message, 503)
        self.deployment_id = deployment_id

    @property
    def message(self) -> str:
        return str(self)


def unserved(error: BaseException) -> bool:
    """Whether `error` says a handle call could not be served: one of the
    above, or a plain HandleError with their status (503)."""
    return isinstance(error, HandleError) and error.status == 503


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
