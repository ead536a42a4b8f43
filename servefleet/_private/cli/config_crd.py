"""`servefleet config crd`: the ServeApplication CRD, on standard output.

Written from the same option tables as `servefleet config schema`
(servefleet/_private/configuration/crd.py); the repository keeps its output
where the Helm chart and the kustomize base take it.
"""

from __future__ import annotations

import argparse
import sys

from servefleet._private.configuration.crd import CRD_PATHS, crd_text

from . import helptext

EXAMPLES = [*(f"servefleet config crd > {path}" for path in CRD_PATHS),
            "",
            "# or straight into a cluster",
            "servefleet config crd | kubectl apply -f -"]


def cmd_crd(args: argparse.Namespace) -> int:
    sys.stdout.write(crd_text())
    return 0


def add_command(commands) -> None:
    """`crd` under `servefleet config`."""
    crd = helptext.add_command(
        commands, "crd", help="print the ServeApplication CustomResourceDefinition "
                              "(Kubernetes)",
        description="Print the CustomResourceDefinition of ServeApplication "
                    "(serveapplications.servefleet.io/v1alpha1): one application of a "
                    "config file as a Kubernetes object, which a controller started with "
                    "--kube-applications applies. Its schema is written from the same "
                    "table of options the validator uses. Nothing is asked of a "
                    "controller.",
        example=EXAMPLES)
    crd.set_defaults(run=cmd_crd)
