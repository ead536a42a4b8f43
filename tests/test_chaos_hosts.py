"""The chaos suite's hosts (bench/nemesis/hosts.py), for real: network
namespaces joined by a bridge, a partition that cuts one host off from a
port and heals, and a lossy link. Needs root, iproute2 and nftables (which
the test command installs); elsewhere it is skipped, as the chaos run then
skips its partitions."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from nemesis.hosts import Hosts, unavailable

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))

SERVE = ("import socket, sys\n"
         "s = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
         "print('up', flush=True)\n"
         "while True:\n"
         "    c, _ = s.accept(); c.sendall(b'hi'); c.close()\n")
REACH = ("import socket, sys\n"
         "try:\n"
         "    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1) as c:\n"
         "        print(c.recv(2).decode())\n"
         "except OSError as e:\n"
         "    print(type(e).__name__)\n")


@pytest.fixture
def hosts():
    made = Hosts(tag=f"t{time.time_ns() % 100000}").create()
    yield made
    made.remove()


def _reach(hosts: Hosts, source: str, target: str, port: int) -> str:
    done = subprocess.run([*hosts.wrap(source), sys.executable, "-c", REACH,
                           hosts.address(target), str(port)],
                          capture_output=True, text=True, timeout=20)
    return done.stdout.strip()


def test_hosts_reach_each_other_and_a_cut_holds_until_healed(hosts) -> None:
    port = 47123
    server = subprocess.Popen([*hosts.wrap("main"), sys.executable, "-c", SERVE,
                               hosts.address("main"), str(port)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        assert _reach(hosts, "c1", "main", port) == "hi"
        assert _reach(hosts, "p1", "main", port) == "hi"
        hosts.cut("c1", [port])
        assert _reach(hosts, "c1", "main", port) == "TimeoutError"  # dropped, not refused
        assert _reach(hosts, "p1", "main", port) == "hi", "only c1 is cut off"
        hosts.heal("c1")
        assert _reach(hosts, "c1", "main", port) == "hi"
        note = hosts.lossy("c2", 5, 50)
        assert "5% loss" in note
        assert _reach(hosts, "c2", "main", port) in ("hi", "TimeoutError")
        hosts.heal("c2")
        assert _reach(hosts, "c2", "main", port) == "hi"
    finally:
        server.kill()
        server.wait()
        server.stdout.close()


def test_the_machine_never_has_the_hosts_addresses(hosts) -> None:
    own = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout
    assert hosts.address("main") not in own and hosts.address("c1") not in own
