"""The cluster's hosts: network namespaces on one bridge (the pattern of
bench/nemesis/hosts.py).

    hub      a bridge, nothing else
    control  etcd, kube-apiserver, kube-controller-manager, kube-scheduler
    node-a   a kubelet and its containerd; its Pods on a bridge of their own
    node-b   the same

Each host has one veth to the hub's bridge with an address in HUB_NET, and
routes to the other nodes' Pod networks through them, so Pods reach each
other and the control plane reaches Pods. These addresses exist only inside
the namespaces; the machine's own namespace reaches the API server on its
loopback through a relay (relay.py).
"""

from __future__ import annotations

import subprocess

from .layout import CONTROL_ADDRESS, CONTROL_NETNS, HUB_NET, HUB_NETNS, NODES, PREFIX


def run(*argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, input=input, timeout=60)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


def existing() -> list[str]:
    listed = run("ip", "netns", "list", check=False).stdout.split()
    return [name for name in listed if name.startswith(f"{PREFIX}-")]


def _host(ns: str, veth: str, address: str) -> None:
    run("ip", "netns", "add", ns)
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth,
        "netns", HUB_NETNS)
    run("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
    run("ip", "-n", ns, "link", "set", "eth0", "up")
    run("ip", "-n", HUB_NETNS, "link", "set", veth, "master", "br0")
    run("ip", "-n", HUB_NETNS, "link", "set", veth, "up")


def create() -> None:
    """The hub, the control plane's host and one host per node; on a failure,
    remove what was made."""
    try:
        run("ip", "netns", "add", HUB_NETNS)
        run("ip", "-n", HUB_NETNS, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", HUB_NETNS, "link", "set", "br0", "up")
        _host(CONTROL_NETNS, f"{PREFIX}-control", CONTROL_ADDRESS)
        for node in NODES:
            _host(node.netns, f"{PREFIX}-{node.name}"[:15], node.address)
            run("ip", "netns", "exec", node.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for node in NODES:
            for ns in [CONTROL_NETNS, *(n.netns for n in NODES if n != node)]:
                run("ip", "-n", ns, "route", "add", node.pod_cidr, "via", node.address)
    except BaseException:
        remove()
        raise


def remove() -> None:
    for ns in existing():
        run("ip", "netns", "del", ns, check=False)


def cut(ns: str) -> None:
    """Drop every packet of host `ns` on its link to the hub (until heal)."""
    run("ip", "netns", "exec", ns, "nft", "-f", "-", input=(
        f"table inet {PREFIX}_cut {{\n"
        "  chain cut_in { type filter hook input priority 0; policy accept; "
        "iifname \"eth0\" drop; }\n"
        "  chain cut_out { type filter hook output priority 0; policy accept; "
        "oifname \"eth0\" drop; }\n"
        "  chain cut_forward { type filter hook forward priority 0; policy accept; "
        "iifname \"eth0\" drop; oifname \"eth0\" drop; }\n"
        "}\n"))


def heal(ns: str) -> None:
    run("ip", "netns", "exec", ns, "nft", "delete", "table", "inet", f"{PREFIX}_cut",
        check=False)


__all__ = ["HUB_NET", "create", "cut", "existing", "heal", "remove", "run"]
