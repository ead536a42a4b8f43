"""The HAProxy engine after replica changes, for bench/data_plane.py --haproxy.

The engine writes the servers it knows when it starts (or reloads) into
HAProxy's configuration file; every replica that comes later, by a rollout
or a scale-up, is a server added over the runtime API (`add server`), which
HAProxy 2.6 sets up from other defaults (issue 51, bug 13: no idle
connection kept, one new connection per request). So beside the engine's
row whose replica was in its configuration file ("haproxy engine"), the
same engine serves two more deployments, changed after it started:

- ROLLED: rolled out to a new version: its one replica was added at run time;
- SCALED: scaled from 1 to 2 replicas: one server from the file, one added.

HAProxy's own counters (its Prometheus exporter, on the proxy's /-/metrics)
say how many connections each row's backend opened per request.
"""

from __future__ import annotations

import re
import time

import httpx

from servefleet.client import ControllerClient
from servefleet.proxy.haproxy.layout import backend_name
from servefleet.v1 import deployment_pb2 as d

HAPROXY = "haproxy engine"  # servers in its configuration file
ROLLED = "haproxy, rolled out"
SCALED = "haproxy, scaled up"
# Each row's route prefix (and deployment name suffix), beside the engine's own row.
CHANGED = {ROLLED: "/rolled", SCALED: "/scaled"}
ROLLED_VERSION = "rolled-out"
_SERVER = re.compile(r'^haproxy_server_status\{proxy="([^"]+)",server="([^"]+)",'
                     r'state="UP"\} (\S+)$', re.M)
_COUNTER = re.compile(r'^haproxy_backend_connection_(attempts|reuses)_total'
                      r'\{proxy="([^"]+)"\} (\S+)$', re.M)


def wait_running(client: ControllerClient, timeout: float = 120) -> None:
    """Until every deployment runs as many replicas as it wants, and no other:
    an engine started then has them all in its configuration file."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deployments = [dep for app in client.status().applications for dep in app.deployments]
        if deployments and all(
                dict(dep.replica_states) == {"RUNNING": dep.target_replicas}
                for dep in deployments):
            return
        time.sleep(0.1)
    raise TimeoutError("deployments not RUNNING")


def _up_servers(engine_url: str) -> dict[str, set[str]]:
    """Backend -> its servers UP in the engine's HAProxy (other states: not listed)."""
    text = httpx.get(engine_url + "/-/metrics", timeout=10).text
    up: dict[str, set[str]] = {}
    for backend, server, value in _SERVER.findall(text):
        if float(value) == 1:
            up.setdefault(backend, set()).add(server)
    return up


def change_replicas(client: ControllerClient, engine_url: str,
                    specs: dict[str, d.DeploymentSpec], timeout: float = 120) -> None:
    """Roll out the ROLLED deployments of `specs` (by name) and scale the
    SCALED ones to 2 replicas; return once the engine's HAProxy has exactly
    the new servers UP (the rolled-out replica's old server gone)."""
    before = _up_servers(engine_url)
    wanted: dict[str, int] = {}
    for name, spec in specs.items():
        changed = d.DeploymentSpec()
        changed.CopyFrom(spec)
        if name.endswith(CHANGED[ROLLED].strip("/")):
            changed.version = ROLLED_VERSION
        else:
            changed.replica_config.num_replicas = 2
        client.deploy(changed)
        wanted[backend_name("default", name)] = changed.replica_config.num_replicas

    def settled() -> bool:
        up = _up_servers(engine_url)
        for backend, count in wanted.items():
            servers, old = up.get(backend, set()), before.get(backend, set())
            added = servers - old
            # Rolled out: only a new server; scaled up: the old one and a new one.
            if len(servers) != count or len(added) != 1:
                return False
        return True

    deadline = time.monotonic() + timeout
    while not settled():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the engine's servers after the changes: {_up_servers(engine_url)}")
        time.sleep(0.2)


def connection_counters(engine_url: str) -> dict[str, tuple[float, float]]:
    """Backend -> (connections opened, requests over a reused one) so far."""
    found: dict[str, dict[str, float]] = {}
    text = httpx.get(engine_url + "/-/metrics", timeout=10).text
    for kind, backend, value in _COUNTER.findall(text):
        found.setdefault(backend, {})[kind] = float(value)
    return {b: (v.get("attempts", 0.0), v.get("reuses", 0.0)) for b, v in found.items()}


def opened_per_1000(before: dict[str, tuple[float, float]],
                    after: dict[str, tuple[float, float]], deployment: str) -> float:
    """Connections `deployment`'s backend opened per 1,000 requests between
    two readings of connection_counters."""
    backend = backend_name("default", deployment)
    opened0, reused0 = before.get(backend, (0.0, 0.0))
    opened1, reused1 = after.get(backend, (0.0, 0.0))
    opened, reused = opened1 - opened0, reused1 - reused0
    return 1000 * opened / max(1.0, opened + reused)
