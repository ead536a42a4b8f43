"""`servefleet xds-bootstrap`: the bootstrap JSON of a proxyless gRPC client."""

from __future__ import annotations

import argparse
import os

from servefleet._private.wire import DEFAULT_CONTROLLER, ENV_CONTROLLER, resolve_addresses

from . import helptext
from .errors import UsageError


def cmd_xds_bootstrap(args: argparse.Namespace) -> int:
    from servefleet._private.xds_bootstrap import render

    addresses = resolve_addresses(args.controller)
    if bool(args.cert) != bool(args.key):
        raise UsageError("--cert and --key go together")
    if args.cert and not args.ca:
        raise UsageError("--cert needs --ca (the CA that signed the controllers' certificates)")
    for flag, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key)):
        if path and not os.path.isfile(path):
            raise UsageError(f"{flag} {path}: no such file")
    print(render(addresses, node_id=args.node_id,
                 ca=os.path.abspath(args.ca) if args.ca else None,
                 cert=os.path.abspath(args.cert) if args.cert else None,
                 key=os.path.abspath(args.key) if args.key else None), end="")
    return 0


def add_command(commands) -> None:
    xds = helptext.add_command(
        commands, "xds-bootstrap",
        help="print the bootstrap JSON of a proxyless gRPC client (GRPC_XDS_BOOTSTRAP)",
        description="Print the bootstrap file a proxyless gRPC client reads (the file named "
                    "by $GRPC_XDS_BOOTSTRAP): the controllers as its xDS servers. The client "
                    "then dials xds:///APPLICATION and calls the replicas directly. Nothing "
                    "is asked of a controller.",
        example=["servefleet xds-bootstrap --controller 127.0.0.1:7373,127.0.0.1:7374 > xds.json",
                 "export GRPC_XDS_BOOTSTRAP=$PWD/xds.json",
                 "",
                 "# a cluster with mutual TLS (servefleet certs init certs): a certificate",
                 "# whose role may watch routes, such as the proxies'",
                 "servefleet xds-bootstrap --ca certs/ca.crt --cert certs/proxy.crt "
                 "--key certs/proxy.key > xds.json"])
    xds.add_argument("--controller", metavar="ADDR[,ADDR...]", default=None,
                     help=f"controller addresses (default: ${ENV_CONTROLLER}, else "
                          f"{DEFAULT_CONTROLLER})")
    xds.add_argument("--node-id", default="", help="the client's node id (default: made up)")
    xds.add_argument("--ca", default=None, metavar="FILE",
                     help="the cluster CA: TLS to the controllers (with --cert/--key: mutual)")
    xds.add_argument("--cert", default=None, metavar="FILE",
                     help="the client's certificate, for mutual TLS (with --ca and --key) "
                          "to the controllers, and to replicas serving TLS for a channel "
                          "with xDS credentials (the certificate provider 'servefleet')")
    xds.add_argument("--key", default=None, metavar="FILE",
                     help="the private key of --cert")
    xds.set_defaults(run=cmd_xds_bootstrap)
