"""What `servefleet up` prints once its applications are RUNNING or have
failed: a command to try per route, and a failure in full.

- Try lines: the `--try-file`'s lines, else one request per routed
  application that gets an answer: `curl` of its route, or, for an OpenAI
  ingress (servefleet.llm's, whose route itself answers 404), a chat
  completion for its first model.
- A failure: `up` stops everything right after it, so `servefleet status`
  can no longer show the details; the error of each failed deployment (else
  the application's, a build error) is printed whole, traceback included.
"""

from __future__ import annotations

import json
import shlex
import textwrap
from collections.abc import Mapping

from servefleet.client import ControllerClient, ControllerError
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

AS = status_pb2.ApplicationStatus
DS = status_pb2.DeploymentStatus
CHAT_PROMPT = "Who made the heaven and the earth?"


def ingress_specs(client: ControllerClient, names: list[str]) -> dict[str, dpb.DeploymentSpec]:
    """Each application's ingress deployment spec, by application name; one
    the controller cannot give is left out (its route is tried as it is)."""
    found = {}
    try:
        for record in client.applications().applications:
            if record.spec.name in names and record.deployment_names:
                found[record.spec.name] = client.get(record.deployment_names[0],
                                                     record.spec.name).spec
    except ControllerError:
        pass  # a suggestion is not worth failing `up` for
    return found


def suggestions(request: api.DeployApplicationsRequest, http: str, try_file: str | None,
                grpc: str | None, ingresses: Mapping[str, dpb.DeploymentSpec]) -> list[str]:
    """The commands to try: the --try-file's lines ({http} and {grpc} filled
    in; a {grpc} line only with a gRPC port), else one request per route."""
    if try_file:
        with open(try_file) as f:
            lines = [line.rstrip() for line in f if line.strip() and not line.startswith("#")]
        return [line.replace("{http}", http).replace("{grpc}", grpc or "") for line in lines
                if grpc or "{grpc}" not in line]
    return [try_line(http, app.route_prefix if app.HasField("route_prefix") else "/",
                     ingresses.get(app.name))
            for app in request.applications if not app.no_route]


def try_line(http: str, route: str, ingress: dpb.DeploymentSpec | None) -> str:
    """A request to `route` that its ingress answers."""
    model = openai_model(ingress)
    if model is None:
        return f"curl http://{http}{route}"
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": CHAT_PROMPT}],
                       "max_tokens": 30})
    return (f"curl http://{http}{route.rstrip('/')}/v1/chat/completions "
            f"-H 'content-type: application/json' -d {shlex.quote(body)}")


def openai_model(ingress: dpb.DeploymentSpec | None) -> str | None:
    """The first model an OpenAI ingress serves; None for any other ingress."""
    from servefleet._private.llm.openai_ingress import OpenAIIngress

    if ingress is None or ingress.import_path != (f"{OpenAIIngress.__module__}:"
                                                  f"{OpenAIIngress.__qualname__}"):
        return None
    try:  # its first init arg maps each model id to the handle serving it
        return next(iter(json.loads(ingress.init_args_json)[0]))
    except (ValueError, IndexError, TypeError, StopIteration):
        return None


def failures_in_full(status: api.GetStatusResponse, names: list[str]) -> list[str]:
    """The lines saying why each of `names` that failed to deploy failed, errors whole."""
    lines = []
    for app in status.applications:
        if app.name not in names or app.status != AS.APPLICATION_STATUS_DEPLOY_FAILED:
            continue
        failed = [(f"{app.name}/{d.name}", d.message) for d in app.deployments
                  if d.status in (DS.DEPLOYMENT_STATUS_DEPLOY_FAILED,
                                  DS.DEPLOYMENT_STATUS_UNHEALTHY)]
        for where, message in failed or [(app.name, app.message)]:
            lines.append(f"{where} failed to deploy:")
            lines += textwrap.indent(message.rstrip() or "(no error reported)",
                                     "  ").splitlines()
    return lines
