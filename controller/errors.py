"""Errors the API reports to clients, each with its gRPC status code, and
client text quoted safely.

Handlers raise these for the caller's mistakes and for conditions the caller
can act on; the servicer turns them into a status with the message. Anything
else is a bug and surfaces as INTERNAL after being logged with its traceback.

Text a client sent (a name, a node id, an xDS NACK's message) goes into a
log line or a message only through `one_line`: written as it came, a line
break in it would forge a log line of its own, and megabytes of it would
flood the log.
"""

from __future__ import annotations

import grpc

# Errors often quote the input they refuse. Past these lengths the quote is cut:
# a status message travels in gRPC metadata (16 KiB at most), and a client's
# 100 KB name must not turn INVALID_ARGUMENT into RESOURCE_EXHAUSTED.
MAX_FIELD_CHARS = 200
MAX_MESSAGE_CHARS = 1_000
# Client text quoted in a log line: names and ids fit; past it, the rest is cut.
MAX_QUOTED_CHARS = 200


def cap(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a note of what was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def one_line(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """Client text quoted on one line, as repr() quotes it: line breaks, other
    control and format characters (terminal escapes, bidi overrides) and
    anything else not printable become escapes (\\n, \\x1b, \\u202e); cut
    to `limit` characters, with a note of what was cut."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text) - limit} more characters)"


class ApiError(Exception):
    code = grpc.StatusCode.UNKNOWN
    # An answer callers expect and act on (no hop pass needed, say): not logged
    # as a refusal.
    expected = False

    def __init__(self, message: str) -> None:
        message = cap(message, MAX_MESSAGE_CHARS)
        super().__init__(message)
        self.message = message


class InvalidArgument(ApiError):
    """A request field breaks a rule; `field` is its path, e.g. spec.replica_config.num_replicas."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, field: str, rule: str) -> None:
        field = cap(field, MAX_FIELD_CHARS)
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


class NotFound(ApiError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ApiError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ApiError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unavailable(ApiError):
    """Retryable: this controller cannot serve now (not the leader, store down)."""

    code = grpc.StatusCode.UNAVAILABLE


class StoreDiskFull(Unavailable):
    """The store's disk has no room for the write; nothing was written.

    RESOURCE_EXHAUSTED rather than UNAVAILABLE: a client that retried at
    once, or at another controller, would only be refused again until
    someone frees space. Still an Unavailable inside the controller: not
    the caller's fault nor a replica's, and waited out like a store that
    is down (the reconcile loop retries its writes with backoff).
    """

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class NotLeader(Unavailable):
    def __init__(self, leader: str | None) -> None:
        hint = f"; the leader is {leader}" if leader else "; no leader is known yet"
        super().__init__("this controller is not the leader" + hint)
        self.leader = leader


class Unauthenticated(ApiError):
    """No credentials, or ones this controller does not accept."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ApiError):
    """The caller is known, but its role or the deploy policy forbids the request."""

    code = grpc.StatusCode.PERMISSION_DENIED
