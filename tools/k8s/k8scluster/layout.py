"""Where scripts/k8s keeps things, and the cluster's fixed shape.

One cluster per machine: its network namespaces have fixed names. Everything
it writes is under .build/k8s (binaries in bin/, the running cluster's state
in run/), except the namespaces' mount points under /run/netns, the cgroups
named after its nodes, and the kubelets' symlinks in /var/log/containers,
which `scripts/k8s stop` removes too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
MODULE = ROOT / "tools" / "k8s"
BUILD = ROOT / ".build" / "k8s"
BIN = BUILD / "bin"
RUN = BUILD / "run"
CNI_BIN = Path("/usr/lib/cni")  # Debian's containernetworking-plugins

PREFIX = "sfk8s"  # namespaces, cgroups and interfaces start with it
HUB_NET = "10.233.0"  # the hosts' addresses: exist only inside the namespaces
SERVICE_CIDR = "10.235.0.0/24"
KUBERNETES_SERVICE_IP = "10.235.0.1"
APISERVER_PORT = 6443  # in the control plane's namespace
PAUSE_IMAGE = "localhost/servefleet/pause:1"
COMMANDS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
            "kube-proxy", "kubectl")


@dataclass(frozen=True)
class Node:
    name: str  # the Kubernetes node name
    host: int  # last byte of its address on the hub
    pod_net: str  # its Pods' /24: first three bytes

    @property
    def address(self) -> str:
        return f"{HUB_NET}.{self.host}"

    @property
    def pod_cidr(self) -> str:
        return f"{self.pod_net}.0/24"

    @property
    def netns(self) -> str:
        return f"{PREFIX}-{self.name}"

    @property
    def cgroup(self) -> str:
        return f"/{PREFIX}-{self.name}"

    @property
    def dir(self) -> Path:
        return RUN / self.name


NODES = (Node("node-a", 11, "10.234.1"), Node("node-b", 12, "10.234.2"))
CONTROL_HOST = 1
CONTROL_ADDRESS = f"{HUB_NET}.{CONTROL_HOST}"
CONTROL_NETNS = f"{PREFIX}-control"
HUB_NETNS = f"{PREFIX}-hub"
PKI = RUN / "pki"
CONTROL_DIR = RUN / "control"


def node(name: str) -> Node:
    for each in NODES:
        if each.name == name:
            return each
    raise SystemExit(f"no node {name!r} in this cluster (nodes: "
                     f"{', '.join(n.name for n in NODES)})")
