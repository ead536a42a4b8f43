"""deploy/stack.yml with deploy/stack.etcd3.yml, deployed for real with
`docker stack deploy` on the test engine's single-node swarm.

On one node the three etcd members, the controller and the proxy share the
host network on loopback ports picked here; the node carries all three etcd
labels. Skipped without an engine and the image, unless
SERVEFLEET_DOCKER_TESTS=required (test_compose.py's rules).
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import grpc
import httpx
import pytest
from loadgen import SteadyLoad
from test_compose import ETCD_IMAGE, IMAGE, _answers, _etcd_image, _unavailable
from test_docker_runtime import LABEL
from test_swarm_runtime import docker_client, swarm

from servefleet._private.testing import free_port, wait_for
from servefleet.client import ControllerClient, ControllerUnreachable

pytestmark = [pytest.mark.slow, pytest.mark.serial]
ROOT = Path(__file__).resolve().parent.parent
__all__ = ["docker_client", "swarm"]  # the engine and swarm fixtures, shared
ETCD_LABELS = [f"servefleet.etcd-{n}" for n in (1, 2, 3)]


def _docker(*args: str, env: dict[str, str] | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], env=env, capture_output=True, text=True,
                          timeout=300, check=check)


@pytest.fixture
def stack(swarm, tmp_path):
    if _docker("image", "inspect", IMAGE, check=False).returncode:
        _unavailable(f"the image {IMAGE} is missing: run scripts/docker-image")
    _etcd_image(tmp_path)
    name = f"sf{uuid.uuid4().hex[:8]}"
    node = swarm.info()["Swarm"]["NodeID"]
    ports = {key: free_port() for key in (
        "SF_ETCD1", "SF_ETCD1_P", "SF_ETCD2", "SF_ETCD2_P", "SF_ETCD3", "SF_ETCD3_P",
        "SF_CONTROLLER_PORT", "SF_METRICS_PORT", "SF_PROXY_PORT")}
    env = {
        **{f"SF_ETCD{n}_ADDR": f"127.0.0.1:{ports[f'SF_ETCD{n}']}" for n in (1, 2, 3)},
        **{f"SF_ETCD{n}_PEER": f"127.0.0.1:{ports[f'SF_ETCD{n}_P']}" for n in (1, 2, 3)},
        "SF_ETCD_CLUSTER": ",".join(f"etcd-{n}=http://127.0.0.1:{ports[f'SF_ETCD{n}_P']}"
                                    for n in (1, 2, 3)),
        "SF_STORE": "etcd://" + ",".join(f"127.0.0.1:{ports[f'SF_ETCD{n}']}"
                                         for n in (1, 2, 3)),
        **{k: str(ports[k]) for k in ("SF_CONTROLLER_PORT", "SF_METRICS_PORT",
                                      "SF_PROXY_PORT")},
        "SF_CONTROLLERS": f"127.0.0.1:{ports['SF_CONTROLLER_PORT']}",
        "SF_CLUSTER": name, "SERVEFLEET_IMAGE": IMAGE, "ETCD_IMAGE": ETCD_IMAGE,
        "SF_PROXY_ENGINE": "haproxy",  # HAProxy serves the port: the stack covers it
    }
    for label in ETCD_LABELS:
        _docker("node", "update", "--label-add", f"{label}=true", node)
    try:
        deployed = _docker("stack", "deploy", "--resolve-image", "never",
                           "-c", str(ROOT / "deploy/stack.yml"),
                           "-c", str(ROOT / "deploy/stack.etcd3.yml"), name,
                           env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", **env}, check=False)
        assert deployed.returncode == 0, deployed.stderr[-3000:]
        yield name, ports
    finally:
        for service in ("controller", "proxy", "deploy", "etcd-1"):
            print(f"--- {service}\n" + _docker("service", "logs", "--tail", "60",
                                             f"{name}_{service}", check=False).stdout[-4000:])
        _docker("stack", "rm", name, check=False)

        def left(label: str) -> list[str]:
            # The list call alone (no inspect per container, which fails for
            # one removed in between).
            return [f"{c['Names']} {c['State']}"
                    for c in swarm.api.containers(all=True, filters={"label": label})]
        # The controller first: while it runs it would replace removed replicas.
        for label in (f"com.docker.stack.namespace={name}", f"{LABEL}cluster={name}"):
            for service in swarm.services.list(filters={"label": f"{LABEL}cluster={name}"}):
                service.remove()
            try:
                wait_for(lambda label=label: not left(label), 90,
                         f"the containers labelled {label} gone")
            except AssertionError:
                raise AssertionError(f"left behind: {left(label)}") from None
        for volume in swarm.volumes.list(filters={"label": f"com.docker.stack.namespace={name}"}):
            volume.remove(force=True)
        for label in ETCD_LABELS:
            _docker("node", "update", "--label-rm", label, node, check=False)


def _leader(controller: str) -> str:
    try:
        with ControllerClient([controller], timeout=3) as client:
            return client.status().leader
    except (ControllerUnreachable, grpc.RpcError):  # not up yet, or not leading yet
        return ""


def test_the_stack_serves_and_a_killed_controller_loses_no_request(stack, swarm) -> None:
    name, ports = stack
    url = f"http://127.0.0.1:{ports['SF_PROXY_PORT']}/sentiment"
    controller = f"127.0.0.1:{ports['SF_CONTROLLER_PORT']}"
    wait_for(lambda: _answers(url), 240, "the example through the stack's proxy")
    assert httpx.get(url, params={"text": "a great day"}).json()["label"] == "positive"

    # The replicas are Swarm services of the stack's cluster, recorded at the
    # node's address; the controller advertises its address towards etcd.
    replicas = {s.id: s.attrs["UpdatedAt"] for s in swarm.services.list(
        filters={"label": f"{LABEL}cluster={name}"})}
    assert len(replicas) == 2, replicas  # examples/sentiment.py runs 2
    assert _leader(controller) == controller

    (container,) = swarm.containers.list(filters={
        "label": f"com.docker.swarm.service.name={name}_controller"})
    with SteadyLoad(url + "?text=good", concurrency=2) as load:
        time.sleep(1)
        container.kill()  # SIGKILL: no resignation; Swarm starts a new task
        wait_for(lambda: _leader(controller) == controller and any(
            c["Id"] != container.id for c in swarm.api.containers(filters={
                "label": f"com.docker.swarm.service.name={name}_controller"})), 120,
            "a new controller task leading")
        time.sleep(2)
    assert load.ok > 50, load.ok
    assert load.bad == [], load.bad[:5]

    # The new controller adopted the replicas' services instead of replacing them.
    with ControllerClient([controller], timeout=30) as client:
        wait_for(lambda: len([r for r in client.replicas(deployment="SentimentModel")
                              if r.record.handle in replicas]) == 2, 60,
                 "the same 2 replicas RUNNING")
    assert {s.id: s.attrs["UpdatedAt"] for s in swarm.services.list(
        filters={"label": f"{LABEL}cluster={name}"})} == replicas
