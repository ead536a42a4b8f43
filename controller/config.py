"""The settings of one controller process (`servefleet controller` flags).

Every field documents its meaning and default; `validate` checks them all in
one place and names the flag at fault.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from dataclasses import dataclass

from servefleet._private.lifecycle import is_loopback
from servefleet._private.security.tls import TlsFiles
from servefleet._private.wire import DEFAULT_CONTROLLER

from .errors import InvalidArgument
from .goals.policy import DeployPolicy
from .goals.spec import check_name
from .runtime.kubernetes_owner import parse_owner
from .runtime.kubernetes_pods import PULL_POLICIES as KUBE_PULL_POLICIES
from .runtime.sandbox import Sandbox
from .store import local_files

RUNTIMES = ("process", "docker", "swarm", "kubernetes", "none", "sim")
_KUBE_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass
class ControllerConfig:
    """Settings of one controller process."""

    # Where hard state lives: etcd://host:port[,host:port...] or sqlite:///path.
    store_url: str
    # host:port the gRPC server binds.
    listen: str = DEFAULT_CONTROLLER
    # host:port other processes use to reach this controller; it is written
    # to the leader key. Default: `listen`; when `listen` binds every
    # interface, the local address this host reaches the store's first etcd
    # member from (as etcd and Consul pick an advertise address), or this
    # host's name for a sqlite store.
    advertise: str | None = None
    # Controllers with the same store and cluster name elect one leader;
    # clusters are isolated from each other by key prefix.
    cluster: str = "default"
    # Seconds the leader's lease lives without renewal (renewed every TTL/3);
    # how long a standby waits after the leader dies without resigning.
    lease_ttl: float = 5.0
    # Seconds in-flight calls get to finish on shutdown.
    shutdown_grace_s: float = 2.0
    # Where replicas run: "process" (local child processes) or "none" (goals
    # are stored and served, but no replicas are run: a control-plane-only
    # controller, as the API tests use), or "sim" (replicas simulated by a
    # sim host process, for scale benchmarks: runtime/sim.py).
    runtime: str = "process"
    # Where the process runtime keeps replica settings and logs.
    runtime_dir: str = "~/.servefleet/runtime"
    # Process runtime: the address replicas bind and are reached at (proxies,
    # handles and the other controllers use it): loopback unless those run in
    # another network namespace or on another host.
    replica_host: str = "127.0.0.1"
    # Docker runtime: the image of deployments that name none, and the network
    # replica containers join ("host": they bind loopback ports like processes).
    docker_image: str = "servefleet:latest"
    docker_network: str = "host"
    # Docker runtime: bind-mount each deployment's working dir from this host
    # ("mount"), or take it as a path inside the image ("image").
    docker_code: str = "mount"
    # Kubernetes runtime (kubernetes_config.py): the kubeconfig (None: in a
    # Pod its ServiceAccount, else $KUBECONFIG, else ~/.kube/config), the
    # namespace replicas' Pods go in (None: the ServiceAccount's in a Pod,
    # else the kubeconfig context's, else "default"), the image of
    # deployments that name none, and its imagePullPolicy.
    kubeconfig: str | None = None
    kube_namespace: str | None = None
    kube_image: str = "servefleet:latest"
    kube_pull_policy: str = "IfNotPresent"
    # Kubernetes runtime: KIND/NAME of an object of that namespace owning the
    # deployments' ConfigMaps (and through them the replicas' Pods and
    # Secrets), e.g. the chart's controllers' Deployment, so deleting it
    # (helm uninstall) deletes them (runtime/kubernetes_owner.py). None:
    # nothing owns them; they outlive the controllers.
    kube_owner: str | None = None
    # Mutual TLS: this controller's CA, certificate and key, for its gRPC
    # server, its calls to replicas and (by default) to etcd. None: plain text.
    tls: TlsFiles | None = None
    # What replicas get for their control servers and their calls to the
    # controllers; needed with `tls`.
    replica_tls: TlsFiles | None = None
    # TLS on the hop to replicas' HTTP ports (hop_tls.py): "auto" (on unless a
    # replica listens on loopback only), "on" or "off"; needs `replica_tls`.
    replica_http_tls: str = "auto"
    # The client certificate for an etcds:// store; default: `tls`.
    etcd_tls: TlsFiles | None = None
    # The bearer-token file (servefleet token create); None: no tokens.
    auth_tokens: str | None = None
    # The file of revoked certificates' serial numbers (servefleet certs
    # revoke; security/revocation.py), reread on SIGHUP; None: none revoked.
    revoked_certs: str | None = None
    # host:port of the HTTP server for /metrics and /-/metrics-targets; None: none.
    metrics_listen: str | None = None
    # DNS names that server answers to besides localhost and IP addresses
    # (api/http_gate.py: a guard against DNS rebinding).
    allow_http_hosts: tuple[str, ...] = ()
    # What deploys may run (goals/policy.py): roots for runtime.working_dir,
    # patterns for runtime.image, and whether runtime.env may be set. Empty /
    # None: the defaults, which depend on whether `listen` is loopback.
    allow_working_dirs: tuple[str, ...] = ()
    allow_images: tuple[str, ...] = ()
    allow_env: bool | None = None
    # Virtualenvs or site-packages below a working dir whose modules import
    # paths may name (goals/policy.py); empty: none.
    allow_packages_below: tuple[str, ...] = ()
    # Whether deploys may send code and init args by value (pickles that
    # replicas load; goals/policy.py): --allow-code-by-value. Default off;
    # the controller servefleet.run starts for its own process turns it on.
    allow_code_by_value: bool = False
    # Who user code runs as on this host (runtime/sandbox.py): "auto", "none",
    # a user name or UID[:GID].
    replica_user: str = "auto"
    # Whether the leader applies the ServeApplications of the namespace
    # (kube_apps/; --kube-applications), through the API server that
    # `kubeconfig` and `kube_namespace` name. Default off.
    kube_applications: bool = False

    def sandbox(self) -> Sandbox:
        """ValueError naming --replica-user when it cannot be."""
        return Sandbox.resolve(self.replica_user,
                               secured=self.tls is not None or self.auth_tokens is not None)

    def deploy_policy(self) -> DeployPolicy:
        return DeployPolicy.build(loopback=is_loopback(self.listen), cwd=os.getcwd(),
                                  default_image=(self.kube_image if self.runtime == "kubernetes"
                                                 else self.docker_image),
                                  working_dirs=self.allow_working_dirs,
                                  images=self.allow_images, allow_env=self.allow_env,
                                  packages_below=self.allow_packages_below,
                                  # Builds and custom policies run on this host
                                  # whatever the runtime; --runtime none runs none.
                                  runs_user_code=self.runtime != "none",
                                  allow_code_by_value=self.allow_code_by_value,
                                  not_code=local_files(self.store_url),
                                  # --runtime none runs no replicas; Docker (or
                                  # Swarm) with code in the image runs none from
                                  # this host, nor does Kubernetes (the image,
                                  # or the nodes' files).
                                  code_on_host=self.runtime == "process" or (
                                      self.runtime in ("docker", "swarm")
                                      and self.docker_code == "mount"))

    def validate(self) -> None:
        """Raise ValueError naming the setting that is wrong."""
        try:
            check_name("--cluster", self.cluster)
        except InvalidArgument as e:
            raise ValueError(e.message) from None
        for flag, value in (("--listen", self.listen), ("--advertise", self.advertise),
                            ("--metrics-listen", self.metrics_listen)):
            if value is not None:
                host, sep, port = value.rpartition(":")
                if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                    raise ValueError(f"{flag} {value!r}: expected HOST:PORT")
        if self.docker_code not in ("mount", "image"):
            raise ValueError(f"--docker-code {self.docker_code!r}: mount or image")
        if self.kube_pull_policy not in KUBE_PULL_POLICIES:
            raise ValueError(f"--kube-pull-policy {self.kube_pull_policy!r}: one of "
                             f"{', '.join(KUBE_PULL_POLICIES)}")
        if self.kube_namespace is not None and not _KUBE_NAMESPACE.match(self.kube_namespace):
            raise ValueError(f"--kube-namespace {self.kube_namespace!r}: a namespace's name is "
                             "at most 63 lower-case letters, digits and '-', starting and "
                             "ending with a letter or digit")
        if not self.kube_image.strip() or any(c.isspace() for c in self.kube_image):
            raise ValueError(f"--kube-image {self.kube_image!r}: an image reference, "
                             "without spaces (servefleet:latest, registry/team/model:7)")
        if self.kube_owner is not None:
            parse_owner(self.kube_owner)
            if self.runtime != "kubernetes":
                raise ValueError(f"--kube-owner {self.kube_owner}: for --runtime kubernetes "
                                 f"(this controller's is {self.runtime})")
        if self.kubeconfig is not None and not os.path.isfile(
                os.path.expanduser(self.kubeconfig)):
            raise ValueError(f"--kubeconfig {self.kubeconfig}: no such file")
        try:
            ipaddress.ip_address(self.replica_host)
        except ValueError:
            raise ValueError(f"--replica-host {self.replica_host!r}: expected an IP address "
                             "of this host (replicas bind it)") from None
        if self.runtime not in RUNTIMES:
            raise ValueError(f"--runtime {self.runtime!r}: one of {', '.join(RUNTIMES)}")
        if self.tls is not None and self.replica_tls is None:
            raise ValueError("TLS: replicas need certificates of their own: --certs DIR "
                             "(with DIR/replica.crt), or --replica-cert and --replica-key")
        self.sandbox()
        if not 0.5 <= self.lease_ttl <= 300:
            raise ValueError(f"--lease-ttl {self.lease_ttl}: must be between 0.5 and 300 seconds")
        if self.kube_applications and self.runtime == "none":
            raise ValueError("--kube-applications: --runtime none builds no application "
                             "(an application is built by importing its code): choose a runtime")

    def advertised(self) -> str:
        if self.advertise:
            return self.advertise
        host, _, port = self.listen.rpartition(":")
        if host in ("0.0.0.0", "[::]", "::", ""):
            return f"{_address_towards(self.store_url) or socket.gethostname()}:{port}"
        return self.listen

    def metrics_advertised(self) -> str | None:
        """Where others scrape this controller's /metrics (its Prometheus
        target): --metrics-listen, or, where that binds every interface, the
        advertised host with its port (a target of 0.0.0.0 reaches nothing)."""
        if self.metrics_listen is None:
            return None
        host, _, port = self.metrics_listen.rpartition(":")
        if host in ("0.0.0.0", "[::]", "::", ""):
            return f"{self.advertised().rpartition(':')[0]}:{port}"
        return self.metrics_listen


def _address_towards(store_url: str) -> str | None:
    """This host's address on the route to the store's first member (no packet
    is sent: a UDP socket's connect only picks the route), or None."""
    scheme, sep, rest = store_url.partition("://")
    if not sep or not scheme.startswith("etcd"):
        return None
    host = rest.split(",")[0].rsplit(":", 1)[0].strip("[]")
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(host) if family == socket.AF_INET else host,
                           2379))
            address = probe.getsockname()[0]
    except OSError:
        return None
    return f"[{address}]" if ":" in address else address
