"""Ray Serve's REST API on the controller's HTTP face: /api/serve/applications/.

- PUT: the body is Ray's ServeDeploySchema as JSON (what a config file
  holds). It is read by the config file's own parser (config_file.py's
  parse_config: every message names the field) and applied as one
  DeployApplications: declarative, so applications it does not list are
  deleted, as Ray's PUT does. 200 with an empty body (Ray's answer); 400
  naming the field for a bad body, 413 past GRPC_MAX_REQUEST_BYTES, and
  nothing changed on any refusal. A relative working_dir is read from the
  controller's working directory (where it looks for code a spec names
  without one). Warning lines (Ray keys not used here) go to the log.
- GET: the cluster in Ray's ServeInstanceDetails shape (rest_details.py).
- DELETE: every application and every deployment deployed on its own is
  deleted (Ray's DELETE shuts Serve down; the controller itself stays).
- GET /api/openapi.json: the document of these (rest_openapi.py).

Who may: the gate (http_gate.py) lets readers and above through; PUT and
DELETE also need a role that may call DeployApplications and
DeleteApplications (deployer, admin): 403 otherwise. A standby answers 503
with the leader's address, as /api/status does: KubeRay and Ray's clients
treat any non-2xx as a failed attempt and try again, so a Service over every
controller reaches the leader on a later attempt, and a client given the
addresses tries the next one.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from servefleet._private.configuration.config_file import parse_config
from servefleet._private.configuration.options import OptionError
from servefleet._private.observability.exposition import send_body
from servefleet._private.security.roles import may_call
from servefleet._private.wire import GRPC_MAX_REQUEST_BYTES
from servefleet.v1 import controller_pb2 as api

from ..errors import MAX_MESSAGE_CHARS, ApiError, NotLeader, one_line
from . import rest_details, rest_openapi

if TYPE_CHECKING:
    from ..term import LeaderTerm

logger = logging.getLogger(__name__)

APPLICATIONS_PATHS = frozenset({rest_openapi.APPLICATIONS_PATH,
                                rest_openapi.APPLICATIONS_PATH.rstrip("/")})
PATHS = APPLICATIONS_PATHS | {rest_openapi.OPENAPI_PATH}
# gRPC status -> HTTP status for a refused change.
HTTP_STATUS = {grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.OUT_OF_RANGE: 400,
               grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.NOT_FOUND: 404,
               grpc.StatusCode.ALREADY_EXISTS: 409, grpc.StatusCode.FAILED_PRECONDITION: 409,
               grpc.StatusCode.ABORTED: 409, grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
               grpc.StatusCode.UNAVAILABLE: 503, grpc.StatusCode.DEADLINE_EXCEEDED: 504}
TEXT = b"text/plain; charset=utf-8"
JSON = b"application/json"


class Refusal(Exception):
    def __init__(self, status: int, message: str,
                 headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_body(body: bytes) -> api.DeployApplicationsRequest:
    """The DeployApplications a PUT's body asks for; Refusal(400) naming the problem."""
    try:
        data = json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        raise Refusal(400, f"the body is not JSON: {e}") from None
    warnings: list[str] = []
    try:
        request = parse_config(data, os.getcwd(), warnings.append)
    except OptionError as e:
        raise Refusal(400, str(e)) from None
    for line in warnings:
        logger.warning("PUT %s: %s", rest_openapi.APPLICATIONS_PATH, line)
    return request


async def read_body(receive: Callable[[], Any], limit: int = GRPC_MAX_REQUEST_BYTES) -> bytes:
    """The request's body; Refusal(413) past `limit` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refusal(400, "the client left before sending its body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Refusal(413, f"the body is larger than {limit} bytes")
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


class RestApi:
    """`term()` is the serving term or None; `leader()` the leader's address."""

    def __init__(self, term: Callable[[], LeaderTerm | None],
                 leader: Callable[[], str | None], identity: str) -> None:
        self._term = term
        self._leader = leader
        self._identity = identity

    async def __call__(self, scope: Any, receive: Any, send: Any, role: str) -> None:
        method = scope["method"]
        try:
            if scope["path"] == rest_openapi.OPENAPI_PATH:
                self._allow(method, ("GET", "HEAD"))
                await send_body(send, 200, rest_openapi.document_bytes(), JSON)
                return
            self._allow(method, ("GET", "HEAD", "PUT", "DELETE"))
            if method in ("PUT", "DELETE"):
                self._check_role(role, "DeployApplications" if method == "PUT"
                                 else "DeleteApplications")
            term = self._term()
            if term is None:
                raise NotLeader(self._leader())
            if method in ("GET", "HEAD"):
                details = rest_details.instance_details(term, self._identity, role)
                await send_body(send, 200, json.dumps(details).encode(), JSON)
                return
            if method == "PUT":
                request = parse_body(await read_body(receive))
                changed, deleted = await term.applications.deploy(request)
                logger.info("PUT %s: changed %s, deleted %s", rest_openapi.APPLICATIONS_PATH,
                            changed, deleted)
            else:
                await delete_everything(term)
            await send_body(send, 200, b"", JSON)
        except Refusal as e:
            await _send_text(send, e.status, e.message, e.headers)
        except NotLeader as e:
            body = json.dumps({"standby": True, "leader": e.leader or self._leader()})
            await send_body(send, 503, body.encode(), JSON)
        except ApiError as e:
            logger.info("refused %s %s: %s: %s", method, scope["path"], e.code.name,
                        one_line(e.message, MAX_MESSAGE_CHARS))
            await _send_text(send, HTTP_STATUS.get(e.code, 500), e.message)
        except Exception:
            logger.exception("internal error in %s %s", method, scope["path"])
            await _send_text(send, 500, f"internal error in {method} {scope['path']}")

    @staticmethod
    def _allow(method: str, allowed: tuple[str, ...]) -> None:
        if method not in allowed:
            raise Refusal(405, f"{method} is not served here: {', '.join(allowed)} are",
                          ((b"allow", ", ".join(allowed).encode()),))

    @staticmethod
    def _check_role(role: str, rpc: str) -> None:
        if not may_call(role, rpc):
            raise Refusal(403, f"the role {role!r} may not change applications "
                               "(deployer or admin may)")


async def _send_text(send: Any, status: int, message: str,
                     headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    body = message.encode() + b"\n"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", TEXT), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


async def delete_everything(term: LeaderTerm) -> None:
    """DELETE: every application (DeleteApplications), then every deployment
    that belongs to none (DeleteDeployments per application)."""
    apps = term.applications
    names = [r.spec.name for r in apps.live()] + list(apps.unusable)
    alone: dict[str, list[str]] = {}
    keys = [(r.spec.application, r.spec.name) for r in term.deployments.live()]
    for application, name in keys + list(term.deployments.unusable):
        if application not in names:
            alone.setdefault(application, []).append(name)
    deleted = await apps.delete(names)
    for application, deployments in sorted(alone.items()):
        deleted += await term.deployments.delete(application, deployments)
    logger.info("DELETE %s: deleted %s", rest_openapi.APPLICATIONS_PATH, deleted)
