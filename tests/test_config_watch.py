"""Controller membership, and replicas following their config on the Watch stream.

The controllers here run with `--runtime none`: nothing but the Watch stream
can bring a replica its new config, so a replica that picks it up proves the
stream path on its own (no Reconfigure RPC exists to do it instead).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servefleet._private.testing import ReplicaProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.replica.main import Replica, ReplicaSettings
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, watch_pb2

APPS = str(Path(__file__).parent / "apps")
PHASE = replica_pb2.ReplicaPhase


def echo_spec(user_config: object, max_ongoing_requests: int = 7) -> d.DeploymentSpec:
    return d.DeploymentSpec(name="d", application="a", import_path="echo_app:Echo",
                            version="v1", runtime=d.RuntimeOptions(working_dir=APPS),
                            replica_config=d.ReplicaConfig(
                                user_config_json=json.dumps(user_config),
                                max_ongoing_requests=max_ongoing_requests))


def test_controllers_list_each_other_and_a_dead_one_drops_out(etcd_fleet) -> None:
    procs = etcd_fleet.start(2, lease_ttl=1.0)
    leader = etcd_fleet.leader()
    standby = next(p for p in procs if p is not leader)
    with ControllerClient(etcd_fleet.addresses(), timeout=10) as client:
        wait_for(lambda: sorted(client.status().controllers) == sorted(etcd_fleet.addresses()),
                 20, "both controllers in GetStatus")
        standby.kill()
        wait_for(lambda: list(client.status().controllers) == [leader.address], 20,
                 "the killed standby gone from the list")


@pytest.fixture
def replica_processes(tmp_path):
    started: list[ReplicaProcess] = []

    def start(**settings) -> ReplicaProcess:
        replica = ReplicaProcess(tmp_path, "echo_app:Echo", working_dir=APPS, **settings)
        started.append(replica)
        return replica

    yield start
    for replica in started:
        replica.close()


def test_a_replica_follows_its_config_stream_across_a_failover(etcd_fleet,
                                                               replica_processes) -> None:
    etcd_fleet.start(2, lease_ttl=1.0)
    first = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses(), timeout=20) as client:
        client.deploy(echo_spec({"round": 1}))
        record = client.get("d", application="a")
        replica = replica_processes(
            version="v1", code_hash=record.code_hash, controllers=etcd_fleet.addresses(),
            user_config_json=json.dumps({"round": 1}), max_ongoing_requests=7)
        replica.wait_phase(PHASE.REPLICA_PHASE_READY)

        def config_round(n: int):
            def check():
                meta = replica.metadata()
                return meta if json.loads(meta.user_config_json or "null") == {"round": n} \
                    else None
            return check

        client.deploy(echo_spec({"round": 2}, max_ongoing_requests=3))
        meta = wait_for(config_round(2), 20, "round 2 from the watch stream")
        assert meta.max_ongoing_requests == 3

        first.kill()
        assert etcd_fleet.leader() is not first
        client.deploy(echo_spec({"round": 3}))
        wait_for(config_round(3), 30, "round 3 from the new leader's stream")


def _replica(version: str = "v1", code_hash: str = "c1") -> Replica:
    return Replica(ReplicaSettings(
        cluster="t", application="a", deployment="d", replica_id="r1", version=version,
        host="127.0.0.1", control_port=1, http_port=2, import_path="m:C",
        code_hash=code_hash))


@pytest.mark.parametrize(("version", "code_hash", "applies"), [
    ("v1", "c1", True), ("v2", "c1", False), ("v1", "c2", False)])
def test_a_replica_takes_only_config_meant_for_its_version_and_code(
        version, code_hash, applies) -> None:
    replica = _replica()
    config = watch_pb2.DeploymentConfig(user_config_json='{"x": 1}', version=version,
                                        code_hash=code_hash)
    replica.on_config_snapshot(watch_pb2.Snapshot(key="config/a/d", config=config))
    assert (replica._pending_config is not None) is applies
    replica.executor.shutdown()
