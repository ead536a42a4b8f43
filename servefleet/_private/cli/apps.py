"""`servefleet deploy`, `config`, `delete` and `shutdown`: applications from config files
(`config schema`, the files' JSON Schema, is config_schema.py's)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from servefleet._private.configuration.config_file import ConfigError, dump_config, load_config
from servefleet._private.messages import error_summary
from servefleet.client import ControllerClient
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import status_pb2

from . import config_schema, helptext, output
from .errors import CommandFailed

AS = status_pb2.ApplicationStatus
DS = status_pb2.DeploymentStatus
WAIT_POLL_S = 0.5

ClientFactory = Callable[[argparse.Namespace], ControllerClient]


def _word(status: int) -> str:
    return output.enum_word(AS, status)


def warn_line(line: str) -> None:
    """A config file's warning (a key renamed, or not used here), on stderr."""
    print(f"warning: {line}", file=sys.stderr)


def cmd_deploy(args: argparse.Namespace, client_for: ClientFactory) -> int:
    try:
        request = load_config(args.config, warn_line)
    except ConfigError as e:
        raise CommandFailed(str(e)) from None
    names = [a.name for a in request.applications]
    with client_for(args) as client:
        # The controller's own answer to "what would this change": the same
        # validation and comparison as the real call, nothing stored.
        plan_request = api.DeployApplicationsRequest()
        plan_request.CopyFrom(request)
        plan_request.dry_run = True
        plan = client.call("DeployApplications", plan_request)
        if args.dry_run:
            for name in names:
                print(f"{name}: {'would deploy' if name in plan.changed else 'unchanged'}")
            for name in plan.deleted:
                print(f"{name}: would be deleted (not in {args.config})")
            return 0
        for name in plan.deleted:
            print(f"{name}: deleting (not in {args.config})")
        reply = client.call("DeployApplications", request)
        for name in names:
            print(f"{name}: {'deploying' if name in reply.changed else 'unchanged'}")
        for name in reply.deleted:
            if name not in plan.deleted:
                print(f"{name}: deleting (not in {args.config})")
        if args.wait:
            wait_running(client, names, args.wait_timeout, print)
    return 0


def wait_running(client: ControllerClient, names: list[str], timeout_s: float,
                 say: Callable[[str], None],
                 give_up: Callable[[], str | None] = lambda: None) -> None:
    """Report each change of the applications' statuses, and of their
    deployments' progress (replicas running, each failed start with its
    error), until all are RUNNING; CommandFailed when one fails to deploy,
    time runs out, or `give_up` says why."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, tuple[int, str]] = {}
    progress: dict[str, str] = {}
    while True:
        reason = give_up()
        if reason:
            raise CommandFailed(reason)
        apps = {a.name: a for a in client.status().applications}
        for name in names:
            app = apps.get(name)
            now = (app.status, app.message) if app else (AS.APPLICATION_STATUS_NOT_STARTED, "")
            if last.get(name) != now:
                last[name] = now
                say(f"{name}: {_word(now[0])}" + (f" ({now[1].splitlines()[0]})"
                                                   if now[1] else ""))
            for line in _progress(app, progress) if app else ():
                say(line)
        failed = [n for n in names if last[n][0] == AS.APPLICATION_STATUS_DEPLOY_FAILED]
        if failed:
            details = "\n".join(failure_text(apps[n]) for n in failed)
            raise CommandFailed(f"{', '.join(failed)} failed to deploy:\n{details}")
        if all(last[n][0] == AS.APPLICATION_STATUS_RUNNING for n in names):
            return
        if time.monotonic() > deadline:
            waiting = [n for n in names if last[n][0] != AS.APPLICATION_STATUS_RUNNING]
            raise CommandFailed(f"{', '.join(waiting)} not RUNNING after {timeout_s:g} s")
        time.sleep(WAIT_POLL_S)


def _progress(app: status_pb2.ApplicationStatusInfo, seen: dict[str, str]) -> list[str]:
    """A line for each deployment of `app` whose progress changed since `seen`
    (updated): a rollout that keeps failing to start is not waited on in
    silence. A settled deployment says nothing; a failed one, the error
    that ends the wait."""
    lines = []
    for d in app.deployments:
        key = f"{app.name}/{d.name}"
        now = d.message.splitlines()[0] if d.message else ""
        if seen.get(key, "") == now:
            continue
        seen[key] = now
        if now and d.status != DS.DEPLOYMENT_STATUS_DEPLOY_FAILED:
            lines.append(f"  {key}: {output.enum_word(DS, d.status)} ({now})")
    return lines


def failure_text(app: status_pb2.ApplicationStatusInfo) -> str:
    """Why an application failed to deploy: each failed deployment's last error
    in one line (else the application's, a build error), and where to see more."""
    failed = [d for d in app.deployments if d.status in (DS.DEPLOYMENT_STATUS_DEPLOY_FAILED,
                                                          DS.DEPLOYMENT_STATUS_UNHEALTHY)]
    lines = [f"  {app.name}/{d.name}: {error_summary(d.message)}" for d in failed] or [
        f"  {app.name}: {error_summary(app.message)}"]
    more = "  (all of it, tracebacks included: servefleet status"
    if failed:
        more += f"; the replicas' output: servefleet logs {failed[0].name} --app {app.name}"
    return "\n".join([*lines, more + ")"])


def cmd_config(args: argparse.Namespace, client_for: ClientFactory) -> int:
    with client_for(args) as client:
        reply = client.applications()
    if args.json:
        print(output.to_json(reply))
    else:
        print(dump_config(reply), end="")
    return 0


def cmd_delete(args: argparse.Namespace, client_for: ClientFactory) -> int:
    with client_for(args) as client:
        if args.deployments:
            deleted = set(client.delete(args.names, application=args.app or ""))
        else:
            deleted = set(client.delete_applications(args.names))
    for name in args.names:
        print(f"deleted {name}" if name in deleted else f"{name}: not found, nothing to delete")
    return 0


def cmd_shutdown(args: argparse.Namespace, client_for: ClientFactory) -> int:
    with client_for(args) as client:
        client.shutdown()
    print("shutdown: every application deleted; the controller exits once its replicas "
          "have stopped")
    return 0


def add_commands(commands, add_controller_flag: Callable[[argparse.ArgumentParser], None],
                 client_for: ClientFactory) -> None:
    def bind(parser: argparse.ArgumentParser, fn) -> None:
        add_controller_flag(parser)
        parser.set_defaults(run=lambda args: fn(args, client_for))

    deploy = helptext.add_command(
        commands, "deploy",
        help="deploy the applications of a config file (and delete the others)",
        description="Make the applications of CONFIG the cluster's applications: new and "
                    "changed ones are deployed (a changed file under an application's "
                    "working_dir is a change), unchanged ones are left alone, and "
                    "applications that are not in CONFIG are DELETED, each named before "
                    "it goes. An unchanged application that failed to deploy (its build "
                    "failed, or its replicas failed to start until the controller stopped "
                    "trying) is deployed again: the cause may have passed. --dry-run "
                    "shows that plan without applying it.",
        example=["servefleet deploy examples/config.yaml --dry-run",
                 "servefleet deploy examples/config.yaml --wait",
                 "servefleet deploy examples/digits/config.yaml "
                 "--controller 10.0.0.5:7373,10.0.0.6:7373"])
    deploy.add_argument("config", metavar="CONFIG", help="YAML config file")
    deploy.add_argument("--dry-run", action="store_true",
                        help="only show what would be deployed, left unchanged and deleted")
    deploy.add_argument("--wait", action="store_true",
                        help="show progress (each failed start too) until every application "
                             "is RUNNING or fails")
    deploy.add_argument("--wait-timeout", type=float, default=300.0, metavar="S",
                        help="with --wait: seconds to wait for RUNNING before giving up "
                             "(default %(default)s)")
    bind(deploy, cmd_deploy)

    config = helptext.add_command(
        commands, "config",
        help="what was last deployed, as a config file (config schema: the file's JSON Schema)",
        description="Print the applications last deployed, as a config file that `servefleet "
                    "deploy` takes back. `servefleet config schema` prints the JSON Schema of "
                    "config files instead.",
        example=["servefleet config > deployed.yaml",
                 "servefleet config --json",
                 "servefleet config schema > config.schema.json"])
    config.add_argument("--json", action="store_true",
                        help="print the ListApplicationsResponse message as JSON instead")
    bind(config, cmd_config)
    config_schema.add_command(config)

    delete = helptext.add_command(
        commands, "delete", help="delete applications (or deployments)",
        example=["servefleet delete sentiment compose",
                 "servefleet delete --deployments SentimentModel --app sentiment"])
    delete.add_argument("names", nargs="+", metavar="NAME",
                        help="the applications (with --deployments: the deployments) to delete")
    delete.add_argument("--deployments", action="store_true",
                        help="the names are deployments of --app, not applications")
    delete.add_argument("--app", default=None, help="with --deployments: the application "
                                                    "(default: default)")
    bind(delete, cmd_delete)

    shutdown = helptext.add_command(
        commands, "shutdown", help="delete everything and stop the controller",
        description="Delete every application; the leader exits once their replicas have "
                    "stopped (up to a minute), giving up leadership. Other controllers and "
                    "proxies keep running.",
        example=["servefleet shutdown", "servefleet shutdown --controller 10.0.0.5:7373"])
    bind(shutdown, cmd_shutdown)
