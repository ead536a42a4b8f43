"""The `servefleet` command.

Subcommands: `up` runs a whole servefleet in the foreground; `controller`
and `proxy` run one service each; `deploy`, `status`, `config`, `list`,
`replicas`, `delete` and `shutdown` talk to a running cluster (default: the
controller `up` starts, 127.0.0.1:7373). Every error prints one line on
stderr (a config error names the file and the path in it) and exits
non-zero (1 for a failed call, 2 for bad usage); no traceback.

Each family of commands builds its own parser and runs it, in a module of
this package: controller_cmd, proxy_cmd, query (status, list, replicas,
logs), xds, apps (deploy, config, delete, shutdown), security (certs, token),
up and build_config; connect.py has the flags and the client of the commands
that talk to a controller.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from servefleet._private.observability import logs
from servefleet._private.tracing import sdk as tracing_setup
from servefleet._private.wire import ENV_CONTROLLER
from servefleet.client import ControllerError, NoControllerRunning

from . import (
    apps,
    build_config,
    connect,
    controller_cmd,
    helptext,
    proxy_cmd,
    query,
    security,
    up,
    xds,
)
from .errors import EXIT_FAILED, EXIT_USAGE, CommandFailed, UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servefleet",
        description="servefleet serves models on a fleet: controllers keep the goals (in etcd, "
                    "or a sqlite file), proxies route HTTP and gRPC to replicas. `up` runs "
                    "all of it here; `controller` and `proxy` run one service each; the other "
                    "commands talk to a running cluster.",
        formatter_class=helptext.Formatter,
        epilog=helptext.examples(
            "servefleet up examples/config.yaml        # a whole servefleet, in the foreground",
            "servefleet status                         # then, in another terminal",
            "servefleet deploy examples/config.yaml --wait",
            "servefleet --log-format json controller --store sqlite:///tmp/servefleet.db",
            "servefleet deploy --help                  # any command's flags and examples"))
    parser.add_argument("--log-format", default=None, choices=logs.FORMATS,
                        help="text (default) or json: one JSON object per line with "
                             "component and request_id (default: $SERVEFLEET_LOG_FORMAT)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="the least severe log lines to print (default %(default)s)")
    tracing_setup.add_flag(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     help="one of these (servefleet COMMAND --help: its flags "
                                          "and examples)")

    controller_cmd.add_command(commands)
    proxy_cmd.add_command(commands)
    query.add_commands(commands)
    xds.add_command(commands)
    apps.add_commands(commands, connect.add_controller_flag, connect.client)
    security.add_commands(commands)
    up.add_command(commands)
    build_config.add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        logs.configure(args.command, args.log_level, args.log_format)
    except ValueError as e:  # a bad SERVEFLEET_LOG_FORMAT
        print(f"servefleet: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        tracing_setup.from_command(args.command, args.tracing)
    except tracing_setup.TracingUnavailable as e:
        print(f"servefleet --tracing: {e}", file=sys.stderr)
        return EXIT_USAGE
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except UsageError as e:
        print(f"servefleet {args.command}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except CommandFailed as e:
        print(f"servefleet {args.command}: {e}", file=sys.stderr)
        return EXIT_FAILED
    except NoControllerRunning as e:
        print(f"servefleet {args.command}: {e.details}; start one with `servefleet up`, or "
              f"name a running one with --controller or ${ENV_CONTROLLER}", file=sys.stderr)
        return EXIT_FAILED
    except ControllerError as e:
        print(f"servefleet {args.command}: {e.code.name}: {e.details}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`servefleet list | head`): not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
