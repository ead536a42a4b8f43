"""`servefleet status`, `list`, `replicas` and `logs`: what a running cluster
has and does, read from its controller."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from servefleet.v1 import controller_pb2 as api

from . import connect, follow, helptext, output
from .errors import UsageError


def cmd_status(args: argparse.Namespace) -> int:
    with connect.client(args) as client:
        reply = client.status()
    print(output.to_json(reply) if args.json else output.status_text(reply))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    with connect.client(args) as client:
        records = client.list(include_deleted=args.all, application=args.app or "")
    print(output.records_json(records) if args.json else output.records_text(records))
    return 0


def cmd_replicas(args: argparse.Namespace) -> int:
    application, deployment = deployment_named(args.name, args.app)
    with connect.client(args) as client:
        infos = client.replicas(application=application, deployment=deployment)
    print(output.records_json(infos) if args.json else output.replicas_text(infos))
    return 0


def deployment_named(name: str | None, app: str | None) -> tuple[str, str]:
    """(application, deployment) from DEPLOYMENT and --app: DEPLOYMENT is a
    name, or APP/NAME as `servefleet replicas` and `list` print it."""
    if not name or "/" not in name:
        return app or "", name or ""
    application, _, deployment = name.partition("/")
    if not application or not deployment or "/" in deployment:
        raise UsageError(f"DEPLOYMENT {name!r}: a name, or APPLICATION/NAME")
    if app and app != application:
        raise UsageError(f"DEPLOYMENT {name!r} is in application {application!r}, "
                         f"but --app says {app!r}")
    return application, deployment


def cmd_logs(args: argparse.Namespace) -> int:
    if not 1 <= args.tail <= 10_000:
        raise UsageError("--tail: between 1 and 10000 lines")
    application, deployment = deployment_named(args.name, args.app)
    with connect.client(args) as client:
        def stream(tail: int) -> Iterator[api.GetLogsResponse]:
            return client.logs(application, deployment, args.replica or "", tail,
                               args.follow, args.request_id or "")

        def emit(replica_id: str, line: str) -> None:
            print(f"{replica_id} | {line}", flush=args.follow)
        try:
            if args.follow:
                follow.follow(stream, args.tail, emit, lambda e: getattr(e, "code", None))
            else:
                for chunk in stream(args.tail):
                    for line in chunk.lines:
                        emit(chunk.replica_id, line)
        except KeyboardInterrupt:
            return 0
    return 0


def add_commands(commands) -> None:
    status = helptext.add_command(
        commands, "status", help="applications, deployments and proxies",
        description="The cluster's applications and their deployments (status, replicas, "
                    "autoscaler, traffic), its controllers and proxies. --json prints the "
                    "GetStatusResponse message, every field present.",
        example=["servefleet status",
                 "servefleet status --json --controller 10.0.0.5:7373,10.0.0.6:7373"])
    connect.add_controller_flag(status)
    status.add_argument("--json", action="store_true",
                        help="print the reply as JSON instead of text")
    status.set_defaults(run=cmd_status)

    lst = helptext.add_command(
        commands, "list", help="list deployments",
        example=["servefleet list --app sentiment", "servefleet list --all --json"])
    connect.add_controller_flag(lst)
    lst.add_argument("--all", action="store_true", help="include deleted deployments")
    lst.add_argument("--app", default=None, help="only this application")
    lst.add_argument("--json", action="store_true",
                     help="print DeploymentRecord messages as JSON instead of text")
    lst.set_defaults(run=cmd_list)

    replicas = helptext.add_command(
        commands, "replicas", help="list replicas, their state and address",
        example=["servefleet replicas", "servefleet replicas SentimentModel --app sentiment"])
    connect.add_controller_flag(replicas)
    replicas.add_argument("name", nargs="?", metavar="DEPLOYMENT",
                          help="only this deployment's replicas (default: all): its name, "
                               "or APPLICATION/NAME")
    replicas.add_argument("--app", default=None, help="only this application")
    replicas.add_argument("--json", action="store_true",
                          help="print ReplicaInfo messages as JSON instead of text")
    replicas.set_defaults(run=cmd_replicas)

    logs_cmd = helptext.add_command(
        commands, "logs", help="replicas' output, from any runtime",
        description="Replicas' output from any runtime, each line after its replica's id "
                    "(REPLICA | LINE).",
        example=["servefleet logs SentimentModel --app sentiment --tail 20 -f",
                 "servefleet logs sentiment/SentimentModel   # as `servefleet replicas` prints it",
                 "",
                 "# one request's lines, from every replica it passed through",
                 "curl -H 'x-request-id: demo-1' 'http://127.0.0.1:8000/compose?text=the+cat'",
                 "servefleet logs --request-id demo-1"])
    connect.add_controller_flag(logs_cmd)
    logs_cmd.add_argument("name", nargs="?", metavar="DEPLOYMENT",
                          help="only this deployment's replicas: NAME, or APPLICATION/NAME "
                               "(default: all)")
    logs_cmd.add_argument("--app", default=None, help="only this application")
    logs_cmd.add_argument("--replica", default=None, metavar="ID", help="only this replica")
    logs_cmd.add_argument("--tail", type=int, default=100, metavar="N",
                          help="past lines of each replica to show first (default 100)")
    logs_cmd.add_argument("-f", "--follow", action="store_true",
                          help="keep printing new lines until Ctrl-C (across the "
                               "controller's hourly end of a follow and a change of leader)")
    logs_cmd.add_argument("--request-id", default=None, metavar="ID",
                          help="only this request's lines (its x-request-id), from every "
                               "replica it passed through, tracebacks included")
    logs_cmd.set_defaults(run=cmd_logs)
