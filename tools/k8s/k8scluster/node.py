"""A node: containerd (Debian's, its CRI plugin on), a kubelet on it and
kube-proxy (nftables), all in the node's namespace and cgroup tree; Pods on a
bridge of the node's own (Debian's CNI plugins: bridge, host-local, loopback)
with the node's Pod network."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from . import pki, procs
from .layout import (
    APISERVER_PORT,
    BIN,
    CNI_BIN,
    CONTROL_ADDRESS,
    PAUSE_IMAGE,
    PKI,
    RUN,
    Node,
)

NETWORK = "servefleet-k8s"  # the CNI network's name


def socket(node: Node) -> Path:
    return node.dir / "containerd.sock"


def names(node: Node) -> list[str]:
    return [f"kubelet-{node.name}", f"kube-proxy-{node.name}", f"containerd-{node.name}"]


def _containerd_config(node: Node) -> Path:
    base = node.dir / "containerd"
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    path = node.dir / "containerd.toml"
    path.write_text(f"""\
version = 2
root = "{base / 'root'}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{socket(node)}"
[ttrpc]
  address = "{node.dir / 'containerd-ttrpc.sock'}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"
[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # Raising a Pod's priority over containerd's own (oom_score_adj -998 for the
  # sandbox) needs CAP_SYS_RESOURCE, which a sandboxed machine may not give.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
[{cri}.cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "{node.dir / 'cni'}"
""")
    return path


def _cni_config(node: Node) -> None:
    (node.dir / "cni").mkdir(parents=True, exist_ok=True)
    (node.dir / "cni" / "10-servefleet.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": "pods0", "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_cidr}]],
                      "routes": [{"dst": "0.0.0.0/0"}],
                      "dataDir": str(node.dir / "cni-ipam")}},
        ]}, indent=1))


def _kubelet_config(node: Node) -> Path:
    (RUN / "resolv.conf").write_text("# scripts/k8s: no DNS in this cluster\n")
    path = node.dir / "kubelet.yaml"
    path.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.address, "port": 10250, "readOnlyPort": 0,
        "tlsCertFile": str(PKI / f"kubelet-{node.name}-serving.crt"),
        "tlsPrivateKeyFile": str(PKI / f"kubelet-{node.name}-serving.key"),
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(PKI / "ca.crt")}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs", "cgroupRoot": node.cgroup, "cgroupsPerQOS": True,
        "failCgroupV1": False, "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{socket(node)}",
        "resolvConf": str(RUN / "resolv.conf"),
        "podLogsDir": str(node.dir / "pod-logs"),
        "volumePluginDir": str(node.dir / "volume-plugins"),
        # Images cannot be pulled again here: never collect them.
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "2%",
                         "imagefs.available": "2%"},
        "registerNode": True, "rotateCertificates": False,
    }, indent=1))
    return path


def _kube_proxy_config(node: Node, kubeconfig: Path) -> Path:
    path = node.dir / "kube-proxy.yaml"
    path.write_text(json.dumps({
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "nftables", "clusterCIDR": "10.234.0.0/16", "hostnameOverride": node.name,
        "bindAddress": node.address, "metricsBindAddress": "127.0.0.1:10249",
        "healthzBindAddress": "127.0.0.1:10256",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        # The conntrack table's size is the machine's: leave it.
        "conntrack": {"maxPerCore": 0, "min": 0},
    }, indent=1))
    return path


def start_containerd(node: Node) -> None:
    node.dir.mkdir(parents=True, exist_ok=True)
    _cni_config(node)
    procs.start(f"containerd-{node.name}",
                ["containerd", "--config", str(_containerd_config(node))],
                netns=node.netns, cgroup=f"{node.cgroup}/runtime")


def ctr(node: Node, *args: str, input_path: Path | None = None) -> str:
    argv = ["ctr", "--address", str(socket(node)), "--namespace", "k8s.io", *args]
    with open(input_path or "/dev/null", "rb") as stdin:
        done = subprocess.run(argv, stdin=stdin, capture_output=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.decode().strip()}")
    return done.stdout.decode()


def import_image(node: Node, tarball: Path) -> None:
    ctr(node, "images", "import", "-", input_path=tarball)


def start_kubelet(node: Node) -> None:
    server = f"https://{CONTROL_ADDRESS}:{APISERVER_PORT}"
    kubeconfig = pki.kubeconfig(node.dir / "kubelet.kubeconfig", server, f"kubelet-{node.name}")
    procs.start(f"kubelet-{node.name}", [
        str(BIN / "kubelet"), "--config", str(_kubelet_config(node)),
        "--kubeconfig", str(kubeconfig), "--root-dir", str(node.dir / "kubelet"),
        "--cert-dir", str(node.dir / "kubelet-pki"), "--hostname-override", node.name,
        "--node-ip", node.address, "--v=1",
    ], netns=node.netns, cgroup=f"{node.cgroup}/kubelet")
    proxy_kubeconfig = pki.kubeconfig(node.dir / "kube-proxy.kubeconfig", server, "kube-proxy")
    procs.start(f"kube-proxy-{node.name}", [
        str(BIN / "kube-proxy"), "--config", str(_kube_proxy_config(node, proxy_kubeconfig)),
        "--v=1",
    ], netns=node.netns, cgroup=f"{node.cgroup}/kube-proxy")
