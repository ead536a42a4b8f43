"""The chaos run's network: hosts of its own, made of network namespaces, so
that the nemesis can cut one process off from others (a partition) or make
its link lossy, and heal it again.

    hub        a bridge, nothing else
    main       the etcd members, the harness (traffic, operations) and the
               embedded side
    c1 c2 c3   one controller each, with the replicas it starts
    p1 p2      one proxy each

Each host has its own loopback and one veth to the hub's bridge, with an
address in NET: those addresses exist only inside these namespaces (the
machine's own namespace never has them), so nothing of the run reaches
beyond them. Processes are started in their host by `ip netns exec` (it
execs, so the pid is the process's), and bind their host's address.

A partition is an nftables table in the target's host that drops its TCP
packets to and from the given ports (another process's listening ports:
its connections there, whichever side opened them); healing deletes the
table. Link loss is `tc netem` on the host's veth where the kernel has
netem; where it has not (`sch_netem` missing), nftables drops a share of
the host's packets at random instead, and a delay cannot be made: the
fault's note says which was done.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable

NET = "10.231.0"  # /24
HOSTS = {"main": 1, "c1": 11, "c2": 12, "c3": 13, "p1": 21, "p2": 22}
TABLE = "servefleet_chaos"


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (iproute2, nftables)"
    return None


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")
    return done


def _table(rules: list[str], on: str = "") -> str:
    """An nftables table whose chains drop, in both directions, what `rules` match
    (on interface `on` only, when given)."""
    chains = []
    for chain, hook, iface in (("out", "output", "oifname"), ("in", "input", "iifname")):
        where = f'{iface} "{on}" ' if on else ""
        body = "\n".join(f"    {where}{rule}" for rule in rules)
        chains.append(f"  chain {chain} {{\n    type filter hook {hook} priority 0; "
                      f"policy accept;\n{body}\n  }}")
    return f"table inet {TABLE} {{\n" + "\n".join(chains) + "\n}\n"


class Hosts:
    def __init__(self, tag: str | None = None) -> None:
        # Namespace and interface names are machine-wide: a run's own tag.
        self.tag = tag or f"{os.getpid() % 100000}"

    def ns(self, host: str) -> str:
        return f"sfchaos{self.tag}-{host}"

    def address(self, host: str) -> str:
        return f"{NET}.{HOSTS[host]}"

    def wrap(self, host: str) -> list[str]:
        """The command prefix that runs a program in `host`."""
        return ["ip", "netns", "exec", self.ns(host)]

    def _veth(self, host: str) -> str:
        return f"sf{self.tag}{host}"[:15]

    def create(self) -> Hosts:
        """Make the hub and every host; on a failure remove what was made."""
        try:
            hub = self.ns("hub")
            _run("ip", "netns", "add", hub)
            _run("ip", "-n", hub, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", hub, "link", "set", "br0", "up")
            for host in HOSTS:
                ns, outside = self.ns(host), self._veth(host)
                _run("ip", "netns", "add", ns)
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name",
                     outside, "netns", hub)
                _run("ip", "-n", ns, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
                _run("ip", "-n", ns, "link", "set", "eth0", "up")
                _run("ip", "-n", hub, "link", "set", outside, "master", "br0")
                _run("ip", "-n", hub, "link", "set", outside, "up")
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Delete every namespace of the run (their veths go with them)."""
        for host in [*HOSTS, "hub"]:
            _run("ip", "netns", "del", self.ns(host), check=False)

    # -- faults ----------------------------------------------------------------

    def _nft(self, host: str, script: str) -> None:
        done = subprocess.run([*self.wrap(host), "nft", "-f", "-"], input=script,
                              capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"nft in {host}: {done.stderr.strip()}")

    def cut(self, host: str, ports: Iterable[int]) -> None:
        """Drop `host`'s TCP packets to and from `ports` until `heal`."""
        listed = ", ".join(str(p) for p in sorted(set(ports)))
        self._nft(host, _table([f"tcp dport {{ {listed} }} drop",
                                f"tcp sport {{ {listed} }} drop"]))

    def lossy(self, host: str, percent: int, delay_ms: int) -> str:
        """Loss (and delay, with netem) on `host`'s link until `heal`; what was done."""
        netem = _run(*self.wrap(host), "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
                     "delay", f"{delay_ms}ms", "loss", f"{percent}%", check=False)
        if netem.returncode == 0:
            return f"netem: {delay_ms} ms delay, {percent}% loss"
        self._nft(host, _table([f"numgen random mod 100 < {percent} drop"], on="eth0"))
        return (f"{percent}% loss by nftables; no delay (this kernel has no netem: "
                f"{netem.stderr.strip()})")

    def heal(self, host: str) -> None:
        _run(*self.wrap(host), "nft", "delete", "table", "inet", TABLE, check=False)
        _run(*self.wrap(host), "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
