"""What `servefleet up TARGET [KEY=VALUE...]` deploys: a config file, or an
import path as Ray Serve's `serve run` takes one.

TARGET is told apart the way `serve run` tells it: a path to a file that
exists is a config file; anything else is an import path (`module:app`, or
Ray's dotted `module.app`), deployed as one application, "default" at "/"
(Ray's name and route; `--name`, `--route-prefix` change them), whose
module is found in `--working-dir` (default: the current directory). For a
builder function, the KEY=VALUE arguments become its args, a dict of
strings, as `serve run hello:app_builder message=hi` passes them.

Nothing is imported here: the controller's build step imports the code, as
for a config file, and a failed build comes back with its traceback. What
is checked first is that TARGET can be one or the other: a file that does
not exist and a module found nowhere are one UsageError naming both.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os

from servefleet._private.configuration.config_file import DEFAULT_APP_NAME, ConfigError, load_config
from servefleet._private.configuration.import_paths import colon_form
from servefleet._private.configuration.ray_config import GRPC_LISTEN_KEYS, grpc_listen_note
from servefleet.controller.goals.grpc_fields import IMPORT_PATH_RE
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as dpb

from .apps import warn_line
from .errors import CommandFailed, UsageError

# The flags that only an import path takes (a config file says these itself).
IMPORT_PATH_FLAGS = (("arguments", "KEY=VALUE", "args"),
                     ("name", "--name", "name"),
                     ("route_prefix", "--route-prefix", "route_prefix"),
                     ("working_dir", "--working-dir", "runtime.working_dir"))


def target_request(args: argparse.Namespace) -> api.DeployApplicationsRequest | None:
    """The request for `up`'s TARGET (None without one); UsageError when it is
    neither a file nor an import path, or has flags of the other kind;
    CommandFailed for a config file that is wrong."""
    if args.target is None or os.path.isfile(args.target):
        for attribute, flag, key in IMPORT_PATH_FLAGS:
            if getattr(args, attribute):
                raise UsageError(
                    f"{flag}: only with an import path; " + (
                        f"the config file {args.target} sets its applications' {key}"
                        if args.target else "none is given"))
        if args.target is None:
            return None
        if args.target.endswith(".py"):
            module = os.path.splitext(os.path.basename(args.target))[0]
            raise UsageError(f"{args.target}: a Python file, not a config file; name what "
                             f"it serves by import path: {module}:app (module:attribute)")
        # up applies grpc_options' address itself (its proxy's --grpc-listen).
        applied = {f"{args.target}: {grpc_listen_note(key)}" for key in GRPC_LISTEN_KEYS}
        try:
            return load_config(args.target,
                               lambda line: None if line in applied else warn_line(line))
        except ConfigError as e:
            raise CommandFailed(str(e)) from None
    if args.working_dir and not os.path.isdir(args.working_dir):
        raise UsageError(f"--working-dir {args.working_dir}: no such directory")
    return import_path_request(args.target, builder_args(args.arguments),
                               os.path.abspath(args.working_dir or "."),
                               args.name or DEFAULT_APP_NAME, args.route_prefix)


def is_config_file(target: str | None) -> bool:
    return target is not None and os.path.isfile(target)


def builder_args(arguments: list[str]) -> dict[str, str]:
    """`KEY=VALUE` arguments as a builder's args, the strings as given (Ray's
    `serve run` form); UsageError naming one that is not."""
    out: dict[str, str] = {}
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if not equals or not key or not value:
            raise UsageError(f"{argument!r}: an application argument is KEY=VALUE "
                             "(passed to the builder function as args[KEY])")
        if key in out:
            raise UsageError(f"{key}: given twice ({out[key]!r} and {value!r})")
        out[key] = value
    return out


def import_path_request(target: str, arguments: dict[str, str], working_dir: str,
                        name: str, route_prefix: str | None) -> api.DeployApplicationsRequest:
    """One application from an import path; UsageError when TARGET is not a
    file and not an import path whose module is found."""
    import_path = colon_form(target)
    if not IMPORT_PATH_RE.fullmatch(import_path):
        kind = "a directory, not a file" if os.path.isdir(target) else "no such file"
        raise UsageError(f"{target}: {kind}, and not an import path either (a config "
                         "file, or module:attribute as `serve run` takes)")
    module = import_path.partition(":")[0]
    top = module.partition(".")[0]
    in_working_dir = importlib.machinery.PathFinder.find_spec(top, [working_dir]) is not None
    if not in_working_dir and not _installed(top):
        raise UsageError(f"{target}: no such file, and no module {top!r} in {working_dir} "
                         "(nor installed) for the import path "
                         f"{import_path}; give a config file, or run where the module is "
                         "(or --working-dir DIR)")
    spec = apb.ApplicationSpec(name=name, import_path=import_path)
    if in_working_dir:  # an installed module needs none (and no tree to hash)
        spec.runtime.CopyFrom(dpb.RuntimeOptions(working_dir=working_dir))
    if route_prefix is not None:
        spec.route_prefix = route_prefix
    if arguments:
        spec.args_json = json.dumps(arguments)
    return api.DeployApplicationsRequest(applications=[spec])


def _installed(module: str) -> bool:
    """Whether a top-level module is importable here, found without running it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # imported already, without a spec (__main__)
        return True


def add_arguments(up: argparse.ArgumentParser) -> None:
    """TARGET, its KEY=VALUE arguments and the flags of an import path."""
    up.add_argument("target", nargs="?", metavar="CONFIG_OR_IMPORT_PATH",
                    help="a YAML config file to deploy, or the import path (module:app) of "
                         "one application, as Ray Serve's `serve run` takes either")
    up.add_argument("arguments", nargs="*", metavar="KEY=VALUE",
                    help="right after an import path naming a builder function: its args "
                         "(a dict of strings)")
    up.add_argument("--working-dir", "--app-dir", default=None, metavar="DIR",
                    help="with an import path: where its module is, the application's "
                         "runtime.working_dir (default: the current directory)")
    up.add_argument("--name", default=None,
                    help=f"with an import path: the application's name (default "
                         f"{DEFAULT_APP_NAME!r}, as Ray's)")
    up.add_argument("--route-prefix", default=None, metavar="PREFIX",
                    help="with an import path: the application's route (default /)")
