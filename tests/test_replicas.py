"""Replicas and the reconcile loop with real controller and replica processes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest

from servefleet._private.testing import wait_for
from servefleet.client import ControllerClient
from servefleet.controller.runtime.process import scan
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
RUNNING = replica_pb2.REPLICA_STATE_RUNNING
DS = status_pb2.DeploymentStatus


def echo_spec(replicas: int = 3, *, version: str = "v1", user_config: object = None,
              **init_kwargs) -> d.DeploymentSpec:
    return d.DeploymentSpec(
        name="Echo", import_path="echo_app:Echo", version=version,
        init_kwargs_json=json.dumps(init_kwargs),
        runtime=d.RuntimeOptions(working_dir=APPS),
        replica_config=d.ReplicaConfig(
            num_replicas=replicas,
            user_config_json=json.dumps(user_config) if user_config is not None else "",
            health_check_period_s=0.3, health_check_timeout_s=2,
            graceful_shutdown_wait_loop_s=0.1, graceful_shutdown_timeout_s=5))


def deployment_status(client: ControllerClient) -> status_pb2.DeploymentStatusInfo | None:
    for app in client.status().applications:
        for dep in app.deployments:
            if dep.name == "Echo":
                return dep
    return None


def healthy(client: ControllerClient, version: str | None = None):
    def check():
        dep = deployment_status(client)
        return (dep is not None and dep.status == DS.DEPLOYMENT_STATUS_HEALTHY
                and (version is None or dep.version == version))
    return check


def deploy_failed(client: ControllerClient) -> status_pb2.DeploymentStatusInfo | None:
    dep = deployment_status(client)
    return dep if dep is not None and dep.status == DS.DEPLOYMENT_STATUS_DEPLOY_FAILED else None


def running(client: ControllerClient) -> list[replica_pb2.ReplicaInfo]:
    return [r for r in client.replicas(deployment="Echo") if r.state == RUNNING]


def ask(address: str) -> dict:
    return httpx.get(f"http://{address}/", timeout=5).json()


def replica_processes(cluster: str) -> dict[str, str]:
    """replica id -> handle, for every replica process of the cluster on this host."""
    return {r.replica_id: r.handle for r, _ in scan(cluster)}


@pytest.fixture
def cluster_client(fleet):
    fleet.start(1, runtime="process")
    fleet.leader()
    with ControllerClient(fleet.addresses(), timeout=30) as client:
        yield client
        client.shutdown()
        wait_for(lambda: not replica_processes(fleet.cluster), 30, "replicas to stop")


def test_replicas_run_are_replaced_when_killed_and_when_unhealthy(cluster_client, fleet,
                                                                  tmp_path) -> None:
    client = cluster_client
    client.deploy(echo_spec(3, unhealthy_dir=str(tmp_path)))
    wait_for(healthy(client), what="3 replicas RUNNING")
    replicas = running(client)
    assert len(replicas) == 3
    assert sorted(r.record.slot for r in replicas) == [0, 1, 2]
    pids = {ask(r.record.http_address)["pid"] for r in replicas}
    assert len(pids) == 3

    victim = replicas[0]
    os.kill(int(victim.record.handle.split(":")[0]), signal.SIGKILL)
    wait_for(lambda: victim.record.replica_id not in {r.record.replica_id
                                                      for r in running(client)}
             and len(running(client)) == 3, what="the killed replica replaced")
    wait_for(healthy(client), what="healthy again")

    # One replica's check_health starts failing: it alone is replaced.
    sick, *others = running(client)
    sick_pid = ask(sick.record.http_address)["pid"]
    (tmp_path / str(sick_pid)).touch()
    wait_for(lambda: sick.record.replica_id not in {r.record.replica_id
                                                    for r in running(client)}
             and len(running(client)) == 3, what="the unhealthy replica replaced")
    still = {r.record.replica_id for r in running(client)}
    assert {o.record.replica_id for o in others} <= still
    # The processes and the registry agree (once the sick one's stop is over).
    wait_for(lambda: set(replica_processes(fleet.cluster)) == {
        r.record.replica_id for r in client.replicas(deployment="Echo")}, 30,
        "processes and registry to agree")


def test_user_config_change_reconfigures_in_place(cluster_client) -> None:
    client = cluster_client
    client.deploy(echo_spec(2, user_config={"threshold": 1}))
    wait_for(healthy(client))
    before = {r.record.replica_id: ask(r.record.http_address) for r in running(client)}
    assert {v["config"]["threshold"] for v in before.values()} == {1}

    reply = client.deploy(echo_spec(2, user_config={"threshold": 7}))
    assert reply.updating

    def reconfigured():
        now = {r.record.replica_id: ask(r.record.http_address) for r in running(client)}
        return now if {v["config"]["threshold"] for v in now.values()} == {7} else None

    after = wait_for(reconfigured, what="new user_config in responses")
    assert set(after) == set(before), "replicas were replaced, not reconfigured"
    assert {v["pid"] for v in after.values()} == {v["pid"] for v in before.values()}


class ReplicaCaller:
    """Calls the running replicas in turn, as a proxy would: a request a replica
    refused (503 x-servefleet-rejected) or never received is retried on another;
    anything else that is not a 200 counts as a failure.

    "Never received": the connection was refused, or an idle keep-alive
    connection was closed by the replica before any response to this GET (as
    HTTP clients retry idempotent requests on a reused connection)."""

    def __init__(self, client: ControllerClient) -> None:
        self._client = client
        self.ok = 0
        self.undelivered = 0
        self.failures: list[str] = []
        self.labels: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with ControllerClient(self._client.addresses, timeout=30) as controller, \
                httpx.Client(timeout=10) as http:
            addresses: list[str] = []
            refreshed = 0.0
            i = 0
            while not self._stop.is_set():
                if time.monotonic() - refreshed > 0.2 or not addresses:
                    addresses = [r.record.http_address for r in controller.replicas(
                        deployment="Echo") if r.state == RUNNING]
                    refreshed = time.monotonic()
                if not addresses:
                    time.sleep(0.05)
                    continue
                address = addresses[i % len(addresses)]
                i += 1
                try:
                    reply = http.get(f"http://{address}/")
                except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                    refreshed = 0.0  # never delivered: refresh and retry elsewhere
                    self.undelivered += 1
                    continue
                except httpx.HTTPError as e:
                    self.failures.append(f"{address}: {type(e).__name__}: {e}")
                    continue
                if reply.status_code == 503 and "x-servefleet-rejected" in reply.headers:
                    refreshed = 0.0
                    continue
                if reply.status_code != 200:
                    self.failures.append(f"{address}: HTTP {reply.status_code} {reply.text}")
                    continue
                self.ok += 1
                self.labels.add(reply.json()["label"])

    def __enter__(self) -> ReplicaCaller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_version_change_rolls_out_without_failed_requests(cluster_client) -> None:
    client = cluster_client
    client.deploy(echo_spec(3, version="v1", label="one"))
    wait_for(healthy(client, "v1"))
    old_ids = {r.record.replica_id for r in running(client)}
    with ReplicaCaller(client) as caller:
        wait_for(lambda: caller.ok > 20, what="traffic before the rollout")
        client.deploy(echo_spec(3, version="v2", label="two"))
        max_seen = 0

        def rolled():
            nonlocal max_seen
            active = [r for r in client.replicas(deployment="Echo")
                      if r.state != replica_pb2.REPLICA_STATE_STOPPING]
            max_seen = max(max_seen, len(active))
            return healthy(client, "v2")()

        wait_for(rolled, 90, "rollout to v2")
        wait_for(lambda: caller.ok > 40, what="traffic after the rollout")
    assert caller.failures == [], caller.failures
    assert caller.labels == {"one", "two"}
    new = running(client)
    assert {r.record.version for r in new} == {"v2"} and len(new) == 3
    assert not old_ids & {r.record.replica_id for r in new}
    assert max_seen <= 4, "more than one replica (20% of 3, at least 1) surged at once"


def test_broken_constructor_fails_the_deployment_until_fixed(cluster_client) -> None:
    client = cluster_client
    client.deploy(echo_spec(1, fail=True))

    dep = wait_for(lambda: deploy_failed(client), 90, "DEPLOY_FAILED")
    assert "constructor exploded on purpose" in dep.message
    assert "ValueError" in dep.message
    # Past the retry cap nothing more is started (test_reconciler checks it
    # over a long stretch of fake time); the failed ones are all stopped.
    wait_for(lambda: client.replicas(deployment="Echo") == [], 30, "failed replicas stopped")

    client.deploy(echo_spec(1, fail=False))
    wait_for(healthy(client), 60, "recovery after fixing the spec")


def test_a_constructor_that_never_finishes_is_stopped_after_startup_timeout_s(
        cluster_client, fleet) -> None:
    client = cluster_client
    spec = echo_spec(1, hang=True)
    spec.replica_config.startup_timeout_s = 1
    client.deploy(spec)

    dep = wait_for(lambda: deploy_failed(client), 90, "DEPLOY_FAILED")
    assert "did not become ready within startup_timeout_s (1 s)" in dep.message
    # Every hung replica process was stopped, none is left holding its slot.
    wait_for(lambda: not replica_processes(fleet.cluster), 30, "hung replicas stopped")
    wait_for(lambda: client.replicas(deployment="Echo") == [], 30, "registry empty")


def test_delete_stops_every_replica(cluster_client, fleet) -> None:
    client = cluster_client
    client.deploy(echo_spec(2))
    wait_for(healthy(client))
    assert len(replica_processes(fleet.cluster)) == 2
    client.delete(["Echo"])
    wait_for(lambda: not replica_processes(fleet.cluster), 30, "replicas stopped")
    wait_for(lambda: client.replicas() == [], 10, "registry empty")
    (record,) = client.list(include_deleted=True)
    assert record.deleted and record.end_time.seconds > 0


def test_leader_killed_mid_rollout_standby_finishes_it(etcd_fleet) -> None:
    etcd_fleet.start(2, runtime="process", lease_ttl=2)
    old_leader = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses(), timeout=30) as client:
        client.deploy(echo_spec(4, version="v1", label="one"))
        wait_for(healthy(client, "v1"), 90, "v1 running")
        v1_pids = set(replica_processes(etcd_fleet.cluster).values())
        with ReplicaCaller(client) as caller:
            wait_for(lambda: caller.ok > 20, what="traffic before the rollout")
            client.deploy(echo_spec(4, version="v2", label="two"))
            wait_for(lambda: any(r.record.version == "v2" for r in running(client)), 60,
                     "the first v2 replica running")
            before_kill = {r.record.replica_id: r.record.handle for r in running(client)}
            old_leader.kill()
            new_leader = etcd_fleet.leader(timeout=30)
            assert new_leader is not old_leader

            seen_slots: dict[tuple[str, int], set[str]] = {}

            def finished():
                for r in client.replicas(deployment="Echo"):
                    if r.state != replica_pb2.REPLICA_STATE_STOPPING:
                        seen_slots.setdefault((r.record.version, r.record.slot), set()).add(
                            r.record.replica_id)
                return healthy(client, "v2")()

            wait_for(finished, 120, "the standby to finish the rollout")
            ok_at_end = caller.ok
            wait_for(lambda: caller.ok > ok_at_end + 20, what="traffic after the rollout")
        assert caller.failures == [], caller.failures
        final = running(client)
        assert len(final) == 4 and {r.record.version for r in final} == {"v2"}
        assert sorted(r.record.slot for r in final) == [0, 1, 2, 3]
        doubled = {k: v for k, v in seen_slots.items() if k[0] == "v2" and len(v) > 1}
        assert doubled == {}, f"a slot got two replicas: {doubled}"
        # Replicas the old leader started and that are still wanted were adopted,
        # not restarted: same replica id, same process.
        for r in final:
            if r.record.replica_id in before_kill:
                assert r.record.handle == before_kill[r.record.replica_id]
        final_ids = {r.record.replica_id for r in final}
        wait_for(lambda: set(replica_processes(etcd_fleet.cluster)) == final_ids, 30,
                 "old replicas to finish stopping, and no orphan left")
        assert not v1_pids & set(replica_processes(etcd_fleet.cluster).values())
        client.shutdown()
    wait_for(lambda: not replica_processes(etcd_fleet.cluster), 30, "replicas to stop")


def test_a_config_the_user_code_rejects_fails_the_replica_with_its_error(cluster_client) -> None:
    client = cluster_client
    client.deploy(echo_spec(1, user_config={"threshold": 1}))
    wait_for(healthy(client))
    # The replica gets the config on its Watch stream, rejects it and keeps the
    # old one; the controller's Reconfigure then brings back the error.
    client.deploy(echo_spec(1, user_config={"reject": True}))

    def reported():
        dep = deployment_status(client)
        return dep if dep is not None and "config rejected on purpose" in dep.message else None

    dep = wait_for(reported, 60, "the reconfigure error in the status message")
    assert dep.status != DS.DEPLOYMENT_STATUS_HEALTHY
