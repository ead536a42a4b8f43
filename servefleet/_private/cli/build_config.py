"""`servefleet build IMPORT_PATH... [-o FILE]`: the config file for applications
written in code (Ray Serve's `serve build`).

Each import path is loaded here, as the controller's build step loads it
(servefleet/_private/applications/build.py: a bound application, a deployment or a builder
function), and becomes one application of the file with every deployment's
options from code written out under `deployments`, so a code-first user can
switch to config-managed deploys (`servefleet deploy FILE`) and edit options
there. One application is served at "/", several at "/<name>", named after
their module. `runtime.working_dir` is --working-dir (default: the current
directory), relative to the file.
"""

from __future__ import annotations

import argparse
import os
import sys

from servefleet._private.applications.build import build
from servefleet._private.configuration.config_file import dump_config
from servefleet._private.configuration.options import OptionError, to_override
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as dpb

from . import helptext
from .errors import CommandFailed, UsageError


def _name(import_path: str) -> str:
    return import_path.partition(":")[0].rpartition(".")[2].replace("_", "-")


def config_for(import_paths: list[str], working_dir: str, base_dir: str) -> str:
    """The YAML for the applications; CommandFailed naming what does not load."""
    reply = api.ListApplicationsResponse()
    relative = os.path.relpath(working_dir, base_dir)
    for import_path in import_paths:
        result = build(import_path, working_dir, {})
        if not result["ok"]:
            raise CommandFailed(f"{import_path}: {result['error']}")
        spec = apb.ApplicationSpec(name=_name(import_path), import_path=import_path,
                                   runtime=dpb.RuntimeOptions(working_dir=relative))
        if len(import_paths) > 1:
            spec.route_prefix = f"/{spec.name}"
        for node in result["graph"]["deployments"]:
            try:
                spec.deployments.append(to_override(f"deployment {node['name']}",
                                                    node.get("options") or {}, node["name"]))
            except OptionError as e:
                raise CommandFailed(str(e)) from None
        reply.applications.add(spec=spec)
    names = [a.spec.name for a in reply.applications]
    if len(set(names)) != len(names):
        raise UsageError(f"two import paths give the same application name ({names}); "
                         "build them into separate files")
    return dump_config(reply)


def cmd_build(args: argparse.Namespace) -> int:
    working_dir = os.path.abspath(args.working_dir)
    if not os.path.isdir(working_dir):
        raise UsageError(f"--working-dir {args.working_dir}: no such directory")
    base = os.path.dirname(os.path.abspath(args.output)) if args.output else os.getcwd()
    text = config_for(args.import_paths, working_dir, base)
    header = ("# Written by `servefleet build " + " ".join(args.import_paths) + "`: deploy it "
              "with `servefleet deploy FILE`.\n")
    if args.output:
        with open(args.output, "w") as f:
            f.write(header + text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        print(header + text, end="")
    return 0


def add_command(commands) -> None:
    parser = helptext.add_command(
        commands, "build", help="write the config file for applications in code",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        example=["servefleet build sentiment:app compose:app --working-dir examples "
                 "-o apps.yaml",
                 "servefleet deploy apps.yaml"])
    parser.add_argument("import_paths", nargs="+", metavar="IMPORT_PATH",
                        help="module:attribute of a bound application, a deployment or a "
                             "builder function")
    parser.add_argument("-o", "--output", default=None, metavar="FILE",
                        help="write the YAML here (default: standard output)")
    parser.add_argument("--working-dir", default=".", metavar="DIR",
                        help="where the modules are (default: the current directory)")
    parser.set_defaults(run=cmd_build)
