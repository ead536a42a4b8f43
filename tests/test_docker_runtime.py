"""The Docker runtime against a real Docker engine.

Needs a running engine and the image built by scripts/docker-image
(`servefleet:latest`). Without them the tests are skipped, unless
SERVEFLEET_DOCKER_TESTS=required (as .ci/run sets), which makes that a failure.
Containers use host networking, so all traffic stays on loopback.
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import signal
import warnings
from datetime import datetime
from pathlib import Path
from typing import NoReturn

import httpx
import pytest

from servefleet._private.testing import ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import replica_pb2, status_pb2

pytestmark = [pytest.mark.slow, pytest.mark.serial]
APPS = str(Path(__file__).parent / "apps")
IMAGE = os.environ.get("SERVEFLEET_TEST_IMAGE", "servefleet:latest")
LABEL = "io.servefleet."
DS = status_pb2.DeploymentStatus


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("SERVEFLEET_DOCKER_TESTS") == "required":
        pytest.fail(f"Docker tests are required here, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def docker_client():
    import docker

    client, error = None, ""
    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    if error:
        if client is not None:
            client.close()
        # docker-py leaves the socket of a failed first connection unclosed: free
        # it here, or the collector warns about it in whichever test runs next.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        _unavailable(f"no Docker engine answers ({error})")
    try:
        client.images.get(IMAGE)
    except Exception:
        client.close()
        _unavailable(f"the image {IMAGE} is missing: run scripts/docker-image")
    yield client
    client.close()


@pytest.fixture
def containers(docker_client, cluster):
    """The cluster's containers (all states), and cleanup after the test."""
    def find(running_only: bool = False) -> list:
        filters = {"label": f"{LABEL}cluster={cluster}"}
        if running_only:
            filters["status"] = "running"
        return docker_client.containers.list(all=not running_only, filters=filters,
                                             ignore_removed=True)

    yield find
    import docker.errors

    for container in find():
        try:
            container.remove(force=True)
        except docker.errors.APIError:
            pass  # gone already, or being removed by the controller


def echo_spec(replicas: int, **fields) -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(
        name="Echo", import_path="echo_app:Echo", route_prefix="/echo",
        runtime=dpb.RuntimeOptions(working_dir=APPS, env={"ECHO_MODE": "docker"},
                                   **fields.pop("runtime", {})),
        replica_config=dpb.ReplicaConfig(
            num_replicas=replicas, health_check_period_s=0.5,
            graceful_shutdown_wait_loop_s=0.1, graceful_shutdown_timeout_s=3,
            resources=dpb.Resources(num_cpus=0.5, memory_bytes=256 * 2**20)),
        **fields)


def deployment(client: ControllerClient, name: str = "Echo"):
    for app in client.status().applications:
        for dep in app.deployments:
            if dep.name == name:
                return dep
    return None


def healthy(client: ControllerClient, count: int):
    def check() -> bool:
        dep = deployment(client)
        running = [r for r in client.replicas(deployment="Echo")
                   if r.state == replica_pb2.REPLICA_STATE_RUNNING]
        return (dep is not None and dep.status == DS.DEPLOYMENT_STATUS_HEALTHY
                and len(running) == count)
    return check


@pytest.fixture
def fleet(etcd_fleet):
    """Controllers on etcd, the store compose and Swarm run containers with
    (the runtime does not touch the store; both stores have their own tests)."""
    return etcd_fleet

def test_containers_serve_scale_get_replaced_and_are_removed(containers, fleet,
                                                             tmp_path) -> None:
    fleet.start(1, runtime="docker")
    fleet.leader()
    with ControllerClient(fleet.addresses(), timeout=30) as client:
        client.deploy(echo_spec(2))
        wait_for(healthy(client, 2), 90, "2 container replicas RUNNING")
        running = containers(running_only=True)
        assert len(running) == 2
        ids = {r.record.replica_id for r in client.replicas(deployment="Echo")}
        assert {c.labels[LABEL + "replica-id"] for c in running} == ids
        assert {c.labels[LABEL + "deployment"] for c in running} == {"Echo"}
        assert all(c.attrs["HostConfig"]["RestartPolicy"]["Name"] in ("no", "")
                   for c in running)
        assert {r.record.handle for r in client.replicas(deployment="Echo")} == {
            c.id for c in running}
        host = running[0].attrs["HostConfig"]
        assert (host["NanoCpus"], host["Memory"]) == (500_000_000, 256 * 2**20)
        assert host["NetworkMode"] == "host"
        assert "ECHO_MODE=docker" in running[0].attrs["Config"]["Env"]
        # num_cpus 0.5: one thread for numeric libraries (runtime/threads.py)
        assert "OMP_NUM_THREADS=1" in running[0].attrs["Config"]["Env"]
        assert running[0].attrs["Config"]["WorkingDir"] == APPS

        proxy = ProxyProcess(fleet.addresses(), log_dir=tmp_path).start()
        try:
            wait_for(lambda: httpx.get(proxy.url + "/echo", timeout=5).status_code == 200, 30,
                     "the route at the proxy")
            assert httpx.get(proxy.url + "/echo").json()["label"] == "echo"
        finally:
            proxy.stop()
        # servefleet logs reads the containers' output through the controller,
        # and so does Prometheus their metrics port.
        chunks = list(client.logs(deployment="Echo", tail_lines=50))
        assert {c.replica_id for c in chunks} == ids
        assert any("ready" in line for c in chunks for line in c.lines)
        metrics = client.replicas(deployment="Echo")[0].record.metrics_address
        assert "servefleet_replica_requests_total" in httpx.get(f"http://{metrics}/metrics").text

        client.deploy(echo_spec(3))
        wait_for(healthy(client, 3), 90, "scaled up to 3")
        client.deploy(echo_spec(1))
        wait_for(lambda: healthy(client, 1)() and len(containers()) == 1, 60,
                 "scaled down to 1, the others removed")

        (victim,) = containers(running_only=True)
        victim.kill()
        wait_for(lambda: healthy(client, 1)() and victim.id not in
                 {c.id for c in containers(running_only=True)}, 60, "the killed one replaced")
        wait_for(lambda: len(containers()) == 1, 30, "the dead container removed")

        client.delete(["Echo"])
        wait_for(lambda: not containers(), 60, "every container removed")


def test_a_new_leader_adopts_the_running_containers(containers, etcd_fleet) -> None:
    etcd_fleet.start(2, runtime="docker", lease_ttl=1.0)
    first = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses(), timeout=30) as client:
        client.deploy(echo_spec(2))
        wait_for(healthy(client, 2), 90, "2 container replicas RUNNING")
        before = {c.id for c in containers()}
        first.signal(signal.SIGKILL)
        assert etcd_fleet.leader() is not first
        wait_for(healthy(client, 2), 60, "healthy under the new leader")
        assert {c.id for c in containers()} == before, "containers were replaced, not adopted"
        assert {r.record.handle for r in client.replicas(deployment="Echo")} == before
        client.delete(["Echo"])
        wait_for(lambda: not containers(), 60, "every container removed")


def test_a_bad_image_is_a_clear_status_without_a_crash_loop(containers, fleet) -> None:
    fleet.start(1, runtime="docker")
    fleet.leader()
    with ControllerClient(fleet.addresses(), timeout=30) as client:
        client.deploy(echo_spec(1, runtime={"image": "servefleet-no-such-image:1"}))
        dep = wait_for(lambda: (d := deployment(client)) is not None
                       and d.status == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED and d, 120,
                       "DEPLOY_FAILED")
        assert "'servefleet-no-such-image:1' is not on this Docker host" in dep.message
        assert not containers()
        times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                 for line in fleet.started[0].logs().splitlines()
                 if "failed: \"could not start" in line]
        assert 1 < len(times) <= 3, f"{len(times)} attempts: it should stop at the cap"
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(times)]
        assert all(gap >= 0.4 for gap in gaps), f"no backoff between attempts: {gaps}"


def test_an_exiting_replica_reports_its_exit_code_and_last_output(containers,
                                                                   fleet) -> None:
    fleet.start(1, runtime="docker")
    fleet.leader()
    with ControllerClient(fleet.addresses(), timeout=30) as client:
        client.deploy(dpb.DeploymentSpec(
            name="Echo", import_path="exits_app:App",
            runtime=dpb.RuntimeOptions(working_dir=APPS),
            replica_config=dpb.ReplicaConfig(num_replicas=1)))
        dep = wait_for(lambda: (d := deployment(client)) is not None
                       and d.status == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED and d, 120,
                       "DEPLOY_FAILED")
        assert "replica exited with code 7" in dep.message
        assert "giving up on purpose" in dep.message  # its last output
        assert json.dumps(dep.message)  # a plain string, not a Docker object dump


def test_containers_no_goal_wants_are_removed(containers, fleet, docker_client,
                                              cluster) -> None:
    # A container labelled as this cluster's replica that no record names: say,
    # one a deposed leader started after losing its lease.
    stray = docker_client.containers.run(
        IMAGE, ["sleep", "300"], detach=True, network_mode="host", init=True,
        labels={LABEL + "cluster": cluster, LABEL + "application": "default",
                LABEL + "deployment": "Ghost", LABEL + "replica-id": "Ghost-0000",
                LABEL + "version": "v0"})
    labels = {LABEL + "cluster": cluster, LABEL + "application": "default",
              LABEL + "deployment": "Ghost", LABEL + "replica-id": "Ghost-dead",
              LABEL + "version": "v0"}
    dead = docker_client.containers.run(IMAGE, ["true"], detach=True, network_mode="host",
                                        labels=labels)
    dead.wait(timeout=30)
    fleet.start(1, runtime="docker")
    fleet.leader()
    wait_for(lambda: not {stray.id, dead.id} & {c.id for c in containers()}, 60,
             "the stray containers removed, the running one and the exited one")


def test_a_container_replica_traces_as_its_controller_does(containers, sqlite_fleet,
                                                           monkeypatch, tmp_path) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from servefleet._private.tracing.otlp_sink import OtlpSink

    sink = OtlpSink().start()
    # The controller's tracing settings reach its containers (runtime/docker.py).
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint)
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    sqlite_fleet.start(1, runtime="docker")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path).start()
    trace_id = "ab" * 16
    try:
        with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
            client.deploy(echo_spec(1))
            wait_for(healthy(client, 1), 90, "a container replica RUNNING")
            wait_for(lambda: httpx.get(proxy.url + "/echo", timeout=5).status_code == 200, 30,
                     "the route at the proxy")
            assert httpx.get(proxy.url + "/echo", headers={
                "traceparent": f"00-{trace_id}-{'cd' * 8}-01"}).status_code == 200
            # The replica's handling: a SERVER span of the deployment's service.
            sink.wait_for(lambda got: any(
                s.trace_id == trace_id and s.service == "Echo" and s.kind == "SERVER"
                for s in got))
            env = containers(running_only=True)[0].attrs["Config"]["Env"]
            assert f"OTEL_EXPORTER_OTLP_ENDPOINT={sink.endpoint}" in env
    finally:
        proxy.stop()
        sink.stop()
