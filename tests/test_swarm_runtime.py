"""The Swarm runtime against a real single-node swarm on the test engine.

The engine and image are the Docker runtime tests' (test_docker_runtime.py:
skipped without them unless SERVEFLEET_DOCKER_TESTS=required). The swarm is
initialised here when the engine is not in one (advertising 127.0.0.1, host
networking only) and left again afterwards, so the engine ends as it began.
"""

from __future__ import annotations

import subprocess

import httpx
import pytest
from test_docker_runtime import LABEL, deployment, docker_client, echo_spec, healthy

from servefleet.client import ControllerClient
from servefleet.testing import ProxyProcess, wait_for
from servefleet.v1 import replica_pb2

pytestmark = pytest.mark.slow
__all__ = ["docker_client"]  # the engine fixture, shared


@pytest.fixture(scope="module")
def swarm(docker_client):
    state = docker_client.info().get("Swarm", {}).get("LocalNodeState")
    joined = False
    if state != "active":
        out = subprocess.run(["docker", "swarm", "init", "--advertise-addr", "127.0.0.1"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, f"docker swarm init failed: {out.stderr}"
        joined = True
    yield docker_client
    if joined:
        subprocess.run(["docker", "swarm", "leave", "--force"], capture_output=True,
                       timeout=60)


@pytest.fixture
def services(swarm, cluster):
    def find() -> list:
        return swarm.services.list(filters={"label": f"{LABEL}cluster={cluster}"})

    yield find
    for service in find():
        service.remove()


def test_services_serve_get_replaced_and_refuse_clearly(services, swarm, sqlite_fleet,
                                                        tmp_path) -> None:
    sqlite_fleet.start(1, runtime="swarm")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path).start()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        try:
            client.deploy(echo_spec(2))
            wait_for(healthy(client, 2), 120, "2 service replicas RUNNING")
            found = services()
            ids = {r.record.replica_id for r in client.replicas(deployment="Echo")}
            assert {s.attrs["Spec"]["Labels"][LABEL + "replica-id"] for s in found} == ids
            spec = found[0].attrs["Spec"]
            assert spec["TaskTemplate"]["RestartPolicy"]["Condition"] == "none"
            assert spec["TaskTemplate"]["Resources"]["Limits"]["NanoCPUs"] == 500_000_000
            url = proxy.url + "/echo"
            wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 30, "the route")
            assert httpx.get(url, timeout=10).json()["label"] == "echo"

            # A replica's container killed: Swarm reports its task failed (it
            # restarts nothing), and the controller replaces the replica.
            victim = next(iter(client.replicas(deployment="Echo"))).record
            container = swarm.containers.list(filters={
                "label": f"com.docker.swarm.service.id={victim.handle}"})[0]
            container.kill()
            wait_for(lambda: victim.replica_id not in {
                r.record.replica_id for r in client.replicas(deployment="Echo")}
                and healthy(client, 2)(), 120, "the killed replica replaced")

            # runtime.placement becomes the service's constraints and preferences.
            placed = echo_spec(1)
            placed.name, placed.route_prefix = "Placed", "/placed"
            placed.runtime.placement.constraints.append("node.role == manager")
            placed.runtime.placement.spread.append("node.labels.zone")
            client.deploy(placed)
            wait_for(lambda: any(r.state == replica_pb2.REPLICA_STATE_RUNNING
                                 for r in client.replicas(deployment="Placed")), 90,
                     "the placed replica RUNNING")
            (service,) = [s for s in services() if s.name.endswith(next(iter(
                client.replicas(deployment="Placed"))).record.replica_id)]
            placement = service.attrs["Spec"]["TaskTemplate"]["Placement"]
            assert placement["Constraints"] == ["node.role == manager"]
            assert placement["Preferences"] == [{"Spread": {"SpreadDescriptor":
                                                            "node.labels.zone"}}]

            # A replica no node can take: a clear reason in the status, not a hang.
            nowhere = echo_spec(1)
            nowhere.name, nowhere.route_prefix = "Nowhere", "/nowhere"
            nowhere.runtime.placement.constraints.append("node.labels.gpu == true")
            client.deploy(nowhere)

            def refused() -> str:
                dep = deployment(client, "Nowhere")
                return dep.message if dep is not None and "Swarm" in dep.message else ""
            wait_for(refused, 90, "the refusal in the status")
            assert "no node can take it" in refused(), refused()
            assert not [r for r in client.replicas(deployment="Nowhere")
                        if r.state == replica_pb2.REPLICA_STATE_RUNNING]
        finally:
            proxy.stop()
            client.shutdown()
    wait_for(lambda: not services(), 60, "the services removed")



def test_a_new_leader_adopts_the_services_without_restarting_them(services, etcd_fleet,
                                                                  tmp_path) -> None:
    etcd_fleet.start(2, runtime="swarm", lease_ttl=2.0)
    leader = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses(), timeout=30) as client:
        try:
            client.deploy(echo_spec(2))
            wait_for(healthy(client, 2), 120, "2 service replicas RUNNING")
            before = {s.id: s.attrs["UpdatedAt"] for s in services()}
            records = {r.record.replica_id for r in client.replicas(deployment="Echo")}
            leader.kill()
            new = etcd_fleet.leader(timeout=30)
            assert new is not leader
            wait_for(healthy(client, 2), 60, "HEALTHY under the new leader")
            # The same services, untouched: adopted by their labels, not replaced.
            assert {s.id: s.attrs["UpdatedAt"] for s in services()} == before
            assert {r.record.replica_id for r in client.replicas(deployment="Echo")} == records
        finally:
            client.shutdown()
    wait_for(lambda: not services(), 60, "the services removed")
