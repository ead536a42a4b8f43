"""The flags and the client of the commands that talk to a running cluster."""

from __future__ import annotations

import argparse
import math

from servefleet._private.wire import DEFAULT_CONTROLLER, ENV_CONTROLLER
from servefleet.client import ControllerClient

from . import security
from .errors import UsageError

# A command whose every controller address refuses connections gives up after
# this long (a controller that answers without a leader yet is waited for).
REFUSED_AFTER_S = 2.0


def add_controller_flag(parser: argparse.ArgumentParser) -> None:
    """--controller and --timeout, and the identity flags (--certs, --token...)."""
    parser.add_argument(
        "--controller", metavar="ADDR[,ADDR...]", default=None,
        help=f"controller addresses (default: ${ENV_CONTROLLER}, else {DEFAULT_CONTROLLER})")
    parser.add_argument("--timeout", type=float, default=15.0, metavar="S",
                        help="seconds to keep trying to reach the leader (default 15)")
    security.add_client_flags(parser)


def client(args: argparse.Namespace) -> ControllerClient:
    """A client for the flags of add_controller_flag; UsageError for bad ones."""
    if not math.isfinite(args.timeout) or args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout}: must be a positive number of seconds")
    try:
        return ControllerClient(args.controller, timeout=args.timeout,
                                refused_after=min(REFUSED_AFTER_S, args.timeout),
                                credentials=security.credentials(args))
    except ValueError as e:
        raise UsageError(f"--controller: {e}") from None
