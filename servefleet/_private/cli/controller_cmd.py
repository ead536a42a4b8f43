"""`servefleet controller`: run one controller (in the foreground)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from servefleet._private.wire import DEFAULT_CONTROLLER

from . import helptext, security
from .errors import EXIT_FAILED, UsageError


def cmd_controller(args: argparse.Namespace) -> int:
    from servefleet.controller.server import ControllerConfig, serve
    from servefleet.controller.store import StoreURLError

    config = ControllerConfig(store_url=args.store, listen=args.listen, advertise=args.advertise,
                              cluster=args.cluster, lease_ttl=args.lease_ttl,
                              runtime=args.runtime, runtime_dir=args.runtime_dir,
                              replica_host=args.replica_host,
                              docker_image=args.docker_image,
                              docker_network=args.docker_network,
                              docker_code=args.docker_code,
                              kubeconfig=args.kubeconfig, kube_namespace=args.kube_namespace,
                              kube_image=args.kube_image,
                              kube_pull_policy=args.kube_pull_policy,
                              kube_owner=args.kube_owner,
                              metrics_listen=args.metrics_listen,
                              allow_http_hosts=tuple(args.allow_http_host),
                              kube_applications=args.kube_applications,
                              **security.controller_security(args))
    try:
        config.validate()
        asyncio.run(serve(config))
    except (ValueError, StoreURLError) as e:
        raise UsageError(str(e)) from None
    except OSError as e:
        print(f"servefleet controller: {e}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def add_command(commands) -> None:
    ctl = helptext.add_command(
        commands, "controller", help="run a controller",
        description="Run one controller in the foreground. Controllers of a cluster share "
                    "an etcd store (one is the leader, the others take over when it goes); "
                    "a single controller may use a sqlite file. `servefleet up` runs one for "
                    "you.",
        example=["# one controller on a sqlite file, replicas as local processes",
                 "servefleet controller --store sqlite:///var/lib/servefleet/state.db",
                 "",
                 "# one of several controllers on etcd, reached from other hosts, mutual TLS",
                 "servefleet controller --store etcd://10.0.0.5:2379,10.0.0.6:2379 "
                 "--listen 0.0.0.0:7373 --advertise 10.0.0.5:7373 --replica-host 10.0.0.5 "
                 "--certs certs",
                 "",
                 "# replicas as Docker containers, metrics and the dashboard on port 8265",
                 "servefleet controller --store sqlite:///var/lib/servefleet/state.db "
                 "--runtime docker --metrics-listen 127.0.0.1:8265",
                 "",
                 "# replicas as Pods in namespace serving ($KUBECONFIG's cluster, or in a "
                 "Pod its ServiceAccount)",
                 "servefleet controller --store etcd://etcd:2379 --runtime kubernetes "
                 "--kube-namespace serving --kube-image registry.example/servefleet:1.4"])
    ctl.add_argument("--store", required=True, metavar="URL",
                     help="etcd://host:port[,host:port...] (etcds:// for etcd over TLS) or "
                          "sqlite:///path/state.db")
    ctl.add_argument("--listen", default=DEFAULT_CONTROLLER, metavar="HOST:PORT",
                     help="where the controller serves its gRPC API (default %(default)s)")
    ctl.add_argument("--advertise", default=None, metavar="HOST:PORT",
                     help="address others reach this controller at (default: --listen; when "
                          "that binds every interface, this host's address towards etcd)")
    ctl.add_argument("--cluster", default="default", metavar="NAME",
                     help="the cluster's name: its key prefix in the store, so that several "
                          "clusters can share one etcd (default %(default)s)")
    ctl.add_argument("--lease-ttl", type=float, default=5.0, metavar="S",
                     help="leader lease TTL in seconds (default 5)")
    ctl.add_argument("--runtime", default="process",
                     choices=["process", "docker", "swarm", "kubernetes", "none", "sim"],
                     help="where replicas run: local processes (default), Docker "
                          "containers, Docker Swarm services (the docker flags apply), "
                          "Kubernetes Pods (the kube flags apply; docs/kubernetes.md), "
                          "none: store and serve goals without running replicas, or sim: "
                          "replicas simulated by a sim host at RUNTIME_DIR/sim-host.sock "
                          "(benchmarks; docs/scale.md)")
    ctl.add_argument("--runtime-dir", default="~/.servefleet/runtime", metavar="DIR",
                     help="process runtime: replica settings and logs (default %(default)s)")
    ctl.add_argument("--replica-host", default="127.0.0.1", metavar="IP",
                     help="process runtime: the address replicas bind and are reached at "
                          "(default %(default)s; this host's address when proxies run elsewhere)")
    ctl.add_argument("--docker-image", default="servefleet:latest", metavar="IMAGE",
                     help="docker runtime: the image of deployments that name none "
                          "(default %(default)s; build it from deploy/Dockerfile)")
    ctl.add_argument("--docker-network", default="host", metavar="NETWORK",
                     help="docker runtime: the network replica containers join "
                          "(default %(default)s)")
    ctl.add_argument("--docker-code", default="mount", choices=["mount", "image"],
                     help="docker runtime: bind-mount each deployment's working dir from "
                          "this host (default), or find it inside the image (a controller "
                          "that itself runs in a container)")
    ctl.add_argument("--kubeconfig", default=None, metavar="PATH",
                     help="kubernetes runtime: the kubeconfig whose current context it "
                          "uses (default: in a Pod, its ServiceAccount; else $KUBECONFIG, "
                          "else ~/.kube/config)")
    ctl.add_argument("--kube-namespace", default=None, metavar="NS",
                     help="kubernetes runtime: the namespace of the replicas' Pods (default: "
                          "in a Pod, its own; else the kubeconfig context's, else default)")
    ctl.add_argument("--kube-image", default="servefleet:latest", metavar="IMAGE",
                     help="kubernetes runtime: the image of deployments that name none "
                          "(default %(default)s)")
    ctl.add_argument("--kube-pull-policy", default="IfNotPresent",
                     choices=["IfNotPresent", "Never", "Always"],
                     help="kubernetes runtime: the Pods' imagePullPolicy (default "
                          "%(default)s)")
    ctl.add_argument("--kube-owner", default=None, metavar="KIND/NAME",
                     help="kubernetes runtime: an object of the namespace (Deployment, "
                          "StatefulSet, DaemonSet, ConfigMap, Secret, ServiceAccount) that owns "
                          "what the controller makes there, so that deleting it deletes the "
                          "replicas' Pods: the Helm chart names its controllers' Deployment "
                          "(default: none; they outlive the controllers)")
    ctl.add_argument("--metrics-listen", default=None, metavar="HOST:PORT",
                     help="serve /metrics, /-/metrics-targets (Prometheus http_sd) and the "
                          "dashboard here (HTTPS and credentials when the cluster has TLS or "
                          "tokens)")
    ctl.add_argument("--allow-http-host", action="append", default=[], metavar="NAME",
                     help="a DNS name the --metrics-listen face answers to besides localhost "
                          "and IP addresses (repeatable)")
    ctl.add_argument("--kube-applications", action="store_true",
                     help="apply the ServeApplications of the Kubernetes namespace (as leader) "
                          "and write their status back; the --kubeconfig and "
                          "--kube-namespace flags say where (docs/kubernetes-applications.md)")
    security.add_controller_flags(ctl)
    ctl.set_defaults(run=cmd_controller)
