"""The Swarm runtime against a real single-node swarm on the test engine.

The engine and image are the Docker runtime tests' (test_docker_runtime.py:
skipped without them unless SERVEFLEET_DOCKER_TESTS=required). The swarm is
initialised here when the engine is not in one (advertising 127.0.0.1, host
networking only) and left again afterwards, so the engine ends as it began.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import uuid

import httpx
import pytest
from test_docker_runtime import IMAGE, LABEL, deployment, docker_client, echo_spec, healthy

from servefleet._private.security.certs import init_certs
from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import replica_pb2

pytestmark = [pytest.mark.slow, pytest.mark.serial]
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
            # Numeric libraries' threads: ceil(num_cpus) when the deployment sets it.
            assert "OMP_NUM_THREADS=1" in spec["TaskTemplate"]["ContainerSpec"]["Env"]
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
            placed.replica_config.ClearField("resources")
            client.deploy(placed)
            wait_for(lambda: any(r.state == replica_pb2.REPLICA_STATE_RUNNING
                                 for r in client.replicas(deployment="Placed")), 90,
                     "the placed replica RUNNING")
            (service,) = [s for s in services() if s.name.endswith(next(iter(
                client.replicas(deployment="Placed"))).record.replica_id)]
            placement = service.attrs["Spec"]["TaskTemplate"]["Placement"]
            assert placement["Constraints"] == ["node.role == manager"]
            # Spread is the runtime's (swarm_spread.py): on this node, which has no
            # zone label, it adds no constraint; Swarm's own preference is not used.
            assert "Preferences" not in placement
            # No num_cpus: the swarm's cores shared by the cluster's 3 replicas.
            cores = sum(n.attrs["Description"]["Resources"]["NanoCPUs"] // 10**9
                        for n in swarm.nodes.list())
            assert f"OMP_NUM_THREADS={max(1, cores // 3)}" in \
                service.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]["Env"]

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


def test_with_tls_replicas_get_their_certificate_as_a_config_and_key_as_a_secret(
        services, swarm, cluster, tmp_path) -> None:
    certs = tmp_path / "certs"
    init_certs(certs)
    controller = ControllerProcess(
        f"sqlite://{tmp_path}/state.db", cluster=cluster, runtime="swarm", log_dir=tmp_path,
        certs=certs, extra_args=["--allow-working-dir", "/", "--allow-image", "*"]).start()
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=controller.credentials) as client:
            client.deploy(echo_spec(1))
            # RUNNING means the controller's health checks passed over mutual
            # TLS: the replica found its files where the secret and configs put them.
            wait_for(healthy(client, 1), 120, "the replica RUNNING over mutual TLS")
            (service,) = services()
            spec = service.attrs["Spec"]["TaskTemplate"]["ContainerSpec"]
            secrets = {s["File"]["Name"] for s in spec.get("Secrets", [])}
            configs = {c["File"]["Name"] for c in spec.get("Configs", [])}
            assert any(name.endswith(".key") for name in secrets), secrets
            assert not any(name.endswith(".key") for name in configs), configs
            assert any(name.endswith(".crt") for name in configs), configs
            client.shutdown()
    finally:
        controller.stop()
    wait_for(lambda: not services(), 60, "the service removed")
    flt = {"label": f"{LABEL}cluster={cluster}"}
    wait_for(lambda: not swarm.secrets.list(filters=flt) and not swarm.configs.list(filters=flt),
             60, "its secret and configs removed")


APPS_ON_OVERLAY = """
applications:
  - name: sentiment
    route_prefix: /sentiment
    import_path: sentiment:app
    runtime: {working_dir: /opt/servefleet/examples}
"""

CLIENT = """
import json, subprocess, urllib.request
reply = urllib.request.urlopen("http://{proxy}:8000/sentiment?text=a+great+day", timeout=10)
listed = subprocess.run(["servefleet", "replicas", "--json", "--controller", "{ctl}:7373"],
                        capture_output=True, text=True, check=True).stdout
print(json.dumps({{"status": reply.status, "body": json.loads(reply.read()),
                  "replicas": json.loads(listed)}}))
"""


def test_replicas_on_an_overlay_network_serve_at_their_own_address(swarm, tmp_path) -> None:
    """Controller, proxy and client are containers on an attachable overlay
    network (nothing on the host reaches it); the replicas join it and are
    recorded at their task addresses there."""
    name = f"sf{uuid.uuid4().hex[:8]}"
    network = swarm.networks.create(name, driver="overlay", attachable=True)
    (tmp_path / "apps.yaml").write_text(APPS_ON_OVERLAY)

    def run(container: str, *command: str, **options):
        return swarm.containers.run(IMAGE, list(command), name=f"{name}-{container}",
                                    network=name, detach=True, **options)
    started = []
    try:
        started.append(run(
            "ctl", "servefleet", "controller", "--store", "sqlite:////tmp/state.db",
            "--listen", "0.0.0.0:7373", "--advertise", f"{name}-ctl:7373",
            "--cluster", name, "--runtime", "swarm", "--docker-network", name,
            "--docker-code", "image", "--docker-image", IMAGE,
            "--allow-working-dir", "/opt/servefleet/examples",
            volumes=["/var/run/docker.sock:/var/run/docker.sock"]))
        started.append(run("proxy", "servefleet", "proxy", "--listen", "0.0.0.0:8000",
                           "--controller", f"{name}-ctl:7373"))

        def client(*command: str) -> str:
            return swarm.containers.run(
                IMAGE, list(command), network=name, remove=True,
                volumes=[f"{tmp_path}:/config:ro"]).decode()
        client("servefleet", "deploy", "/config/apps.yaml", "--wait", "--timeout", "120",
               "--controller", f"{name}-ctl:7373")
        script = CLIENT.format(proxy=f"{name}-proxy", ctl=f"{name}-ctl")
        seen = wait_for(lambda: _answered(client, script), 60, "an answer through the proxy")
        assert seen["body"]["label"] == "positive"
        network.reload()
        subnet = network.attrs["IPAM"]["Config"][0]["Subnet"]
        addresses = {r["record"]["http_address"].rsplit(":", 1)[0] for r in seen["replicas"]}
        assert len(addresses) == 2, seen["replicas"]
        assert all(ipaddress.ip_address(a) in ipaddress.ip_network(subnet)
                   for a in addresses), (addresses, subnet)
    finally:
        for container in started:
            print(container.logs(tail=40).decode(errors="replace"))
            container.remove(force=True)
        for service in swarm.services.list(filters={"label": f"{LABEL}cluster={name}"}):
            service.remove()
        wait_for(lambda: not swarm.api.containers(
            all=True, filters={"label": f"{LABEL}cluster={name}"}), 60, "replicas gone")
        wait_for(lambda: _removed(network), 60, "the network removed")


def _removed(network) -> bool:
    """Swarm frees a network a little after its last task is gone."""
    import docker.errors

    try:
        network.remove()
    except docker.errors.NotFound:
        return True
    except docker.errors.APIError:
        return False
    return True


def _answered(client, script: str) -> dict | None:
    try:
        seen = json.loads(client("python3", "-c", script).strip().splitlines()[-1])
    except Exception as e:
        print("no answer yet:", repr(e)[-400:])  # shown if the test fails
        return None
    return seen if seen["status"] == 200 else None
