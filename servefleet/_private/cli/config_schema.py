"""`servefleet config schema`: the config file's JSON Schema, on standard output.

Written from the tables the config file is validated with
(servefleet/_private/configuration/config_schema.py); the repository keeps its output in
docs/schema/config.schema.json, which the example configs name on their
first line for editors (yaml-language-server).
"""

from __future__ import annotations

import argparse
import sys

from servefleet._private.configuration.config_schema import SCHEMA_PATH, schema_text

from . import config_crd, helptext

EXAMPLES = [f"servefleet config schema > {SCHEMA_PATH}   # what the repository keeps",
            "",
            "# then, as the first line of a config file, the schema's path relative to it:",
            f"# yaml-language-server: $schema=../{SCHEMA_PATH}"]


def cmd_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(schema_text())
    return 0


def add_command(config: argparse.ArgumentParser) -> None:
    """`schema` under `servefleet config` (which alone prints the deployed config)."""
    commands = config.add_subparsers(dest="config_command", metavar="{schema,crd}",
                                     title="subcommands")
    schema = helptext.add_command(
        commands, "schema", help="print the config file's JSON Schema (editors validate and "
                                 "complete config files with it)",
        description="Print the JSON Schema (draft 2020-12) of the config files that "
                    "`servefleet deploy` and `servefleet up` read, Ray Serve's keys "
                    "included, written from the same table of options the validator "
                    "uses. Nothing is asked of a controller.",
        example=EXAMPLES)
    schema.set_defaults(run=cmd_schema)
    config_crd.add_command(commands)
