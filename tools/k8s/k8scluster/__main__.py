"""scripts/k8s: a Kubernetes cluster on this machine (see docs/kubernetes.md).

    scripts/k8s build                 build the commands and Helm (cached); say how long it took
    scripts/k8s start [--image NAME]...  [--port N]
    scripts/k8s load NAME...          load Docker images into the running cluster's nodes
    scripts/k8s stop
    scripts/k8s status
    scripts/k8s kill-node NODE        every process of NODE killed at once
    scripts/k8s start-node NODE       a killed NODE started again (its state kept)
    scripts/k8s cut NODE | heal NODE  NODE's network cut off from the others / back
"""

from __future__ import annotations

import argparse
import sys
import time

from . import build, cluster, netns, procs
from .layout import node


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/k8s", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build the Kubernetes commands, Helm and the pause image "
                                 "(cached)")
    start = sub.add_parser("start", help="start the cluster; prints the KUBECONFIG to use")
    start.add_argument("--image", action="append", default=[],
                       help="a Docker image to load into the nodes (docker save); repeatable")
    start.add_argument("--port", type=int, default=0,
                       help="the API server's port on 127.0.0.1 (default: a free one)")
    sub.add_parser("load", help="load Docker images into the running cluster's nodes").add_argument(
        "image", nargs="+")
    sub.add_parser("stop", help="stop everything start started and remove its state")
    sub.add_parser("status", help="which of the cluster's processes run")
    for name, text in (("kill-node", "kill every process of a node"),
                       ("start-node", "start a killed node again"),
                       ("cut", "cut a node's network off"), ("heal", "undo cut")):
        sub.add_parser(name, help=text).add_argument("node")
    args = parser.parse_args(argv)
    if args.command == "build":
        began = time.monotonic()
        took = build.build()
        print(f"built in {took:.0f} s" if took else
              f"current (checked in {time.monotonic() - began:.1f} s)")
    elif args.command == "start":
        tarballs = [cluster.export_image(image) for image in args.image]
        cluster.start(tarballs, args.port)
    elif args.command == "load":
        cluster.preflight()
        cluster.load([cluster.export_image(image) for image in args.image])
    elif args.command == "stop":
        cluster.preflight()
        cluster.stop()
    elif args.command == "status":
        names = cluster._all_names()
        for name in names:
            print(f"{name}: {'running' if procs.alive(name) else 'stopped'}")
        return 0 if all(procs.alive(n) for n in names) else 1
    elif args.command == "kill-node":
        cluster.kill_node(args.node)
    elif args.command == "start-node":
        cluster.preflight()
        cluster.start_node(args.node)
    elif args.command == "cut":
        netns.cut(node(args.node).netns)
    elif args.command == "heal":
        netns.heal(node(args.node).netns)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
