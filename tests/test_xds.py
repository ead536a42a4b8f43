"""The controller as an xDS server, with real proxyless gRPC clients (grpcio's
xDS resolver, `xds:///<application>`) calling replicas with no proxy hop."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import Credentials, TlsFiles
from servefleet._private.testing import ControllerProcess, wait_for
from servefleet._private.xds_bootstrap import render
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import replica_pb2

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import grpc_stream_calls as calls  # noqa: E402

APPS = str(ROOT / "tests" / "apps")
SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"
pytestmark = pytest.mark.slow


class XdsLoad:
    """tests/xds_load.py in a process of its own; `last` is its latest report."""

    def __init__(self, controllers: list[str], application: str, callers: int = 4,
                 hop_pass: str = "", **bootstrap: Any) -> None:
        env = {**os.environ, "GRPC_XDS_BOOTSTRAP_CONFIG": render(controllers, **bootstrap)}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "xds_load.py"), application,
             "--callers", str(callers), *(["--hop-pass", hop_pass] if hop_pass else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
            text=True)
        self.last: dict[str, Any] = {"replicas": {}, "labels": {}, "failed": []}
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.last = json.loads(line)
            except ValueError:
                self.output.append(line)

    def calls(self) -> int:
        return sum(self.last["replicas"].values())

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """Calls per replica since the counts `before`."""
        now = self.last["replicas"]
        return {k: v - before.get(k, 0) for k, v in now.items() if v > before.get(k, 0)}

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(30)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _model(replicas: int, version: str = "v1", label: str = "one") -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(
        name="Model", application="clf", import_path="grpc_app:Model", version=version,
        init_kwargs_json=json.dumps({"label": label}), grpc_servicer_functions=[SERVICER],
        runtime=dpb.RuntimeOptions(working_dir=APPS),
        replica_config=dpb.ReplicaConfig(num_replicas=replicas, max_ongoing_requests=8,
                                         graceful_shutdown_wait_loop_s=0.2,
                                         graceful_shutdown_timeout_s=5))


def _running_pids(client: ControllerClient, deployment: str = "Model") -> set[str]:
    return {r.record.handle.split(":")[0] for r in client.replicas("clf", deployment)
            if r.state == replica_pb2.REPLICA_STATE_RUNNING}


@pytest.fixture
def xds_cluster(sqlite_fleet):
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        yield client, sqlite_fleet.addresses()
        client.shutdown()


def test_proxyless_calls_follow_scaling_and_rollouts(xds_cluster) -> None:
    client, controllers = xds_cluster
    client.deploy(_model(1))
    wait_for(lambda: len(_running_pids(client)) == 1, 60, "1 replica running")
    load = XdsLoad(controllers, "clf")
    try:
        wait_for(lambda: load.calls() > 50, 30, f"proxyless calls ({load.output[-3:]})")
        # The answers come from the replicas themselves (their pids), no proxy between.
        assert set(load.last["replicas"]) == _running_pids(client)

        # Scale 1 -> 3: within a few seconds every replica gets calls.
        client.deploy(_model(3))
        wait_for(lambda: len(_running_pids(client)) == 3, 60, "3 replicas running")
        before = dict(load.last["replicas"])
        wait_for(lambda: set(load.since(before)) == _running_pids(client), 5,
                 "calls reaching all 3 replicas")

        # Scale 3 -> 1: the removed replicas get no new calls, and no call fails.
        client.deploy(_model(1))
        wait_for(lambda: len(client.replicas("clf", "Model")) == 1, 60, "2 replicas stopped")
        # Counts from a report made after they stopped (reports come every 0.2 s:
        # an older one may lack their last answers; seen in a CI run).
        stopped = time.time()
        wait_for(lambda: load.last.get("t", 0) > stopped + 0.3, 10, "a fresh report")
        before = dict(load.last["replicas"])
        wait_for(lambda: sum(load.since(before).values()) > 100, 30, "calls after scale-down")
        assert set(load.since(before)) == _running_pids(client)

        # A rolling update under proxyless load fails no call.
        client.deploy(_model(2, "v2", "two"))
        wait_for(lambda: {r.record.version for r in client.replicas("clf", "Model")} == {"v2"}
                 and len(_running_pids(client)) == 2, 90, "rollout to v2")
        before = dict(load.last["labels"])
        wait_for(lambda: load.last["labels"].get("two", 0) > before.get("two", 0) + 100, 30,
                 "calls to v2")
    finally:
        load.stop()
    print(f"proxyless: {load.calls()} calls, failed: {load.last['failed'][:5]}")
    assert load.last["failed"] == []


def test_client_and_bidirectional_streams_proxyless(xds_cluster, tmp_path) -> None:
    """tests/test_grpc_streams.py's calls with no proxy: flow control,
    order and cancellation both ways are gRPC's and the replica's own."""
    client, controllers = xds_cluster
    client.deploy_applications([calls.streams_application(tmp_path)])
    wait_for(lambda: len(client.replicas("streams", "Streams")) == 1 and all(
        r.state == replica_pb2.REPLICA_STATE_RUNNING
        for r in client.replicas("streams", "Streams")), 60, "the replica running")
    env = {**os.environ, "GRPC_XDS_BOOTSTRAP_CONFIG": render(controllers),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), APPS])}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "xds_streams.py"), "streams",
                           str(tmp_path)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["upload"] == [10_000, 163_840_000, True]
    assert 100 <= got["ahead"] < 5000
    assert got["echoes"] == list(range(1000))
    assert got["stopped"][:3] == ["ABORTED", "stopped after 5 chunks", 5]
    assert got["stopped"][3] < 100_000
    wait_for(lambda: (tmp_path / "proxyless-gone").exists(), 10,
             "the cancellation reaching the replica")


def test_a_weighted_split_shows_in_the_call_counts(xds_cluster) -> None:
    client, controllers = xds_cluster
    client.deploy_applications([apb.ApplicationSpec(
        name="clf", import_path="grpc_app:split", no_route=True,
        grpc_servicer_functions=[SERVICER], runtime=dpb.RuntimeOptions(working_dir=APPS),
        traffic=apb.TrafficPolicy(split=[apb.WeightedDeployment(deployment="Model", weight=80),
                                         apb.WeightedDeployment(deployment="Canary",
                                                                weight=20)]))])
    wait_for(lambda: _running_pids(client, "Model") and _running_pids(client, "Canary"), 90,
             "both deployments running")
    load = XdsLoad(controllers, "clf")
    try:
        wait_for(lambda: load.calls() > 2000, 60, f"2,000 proxyless calls ({load.output[-3:]})")
    finally:
        load.stop()
    labels = load.last["labels"]
    share = labels.get("canary", 0) / sum(labels.values())
    print(f"weighted split 80/20 over xDS: {labels}, canary share {share:.3f}")
    assert 0.15 < share < 0.25 and load.last["failed"] == []


def test_the_client_rides_out_a_leader_crash(etcd_fleet) -> None:
    etcd_fleet.start(2, runtime="process", lease_ttl=2.0)
    leader = etcd_fleet.leader()
    with ControllerClient(etcd_fleet.addresses(), timeout=30) as client:
        client.deploy(_model(2))
        wait_for(lambda: len(_running_pids(client)) == 2, 60, "2 replicas running")
        load = XdsLoad(etcd_fleet.addresses(), "clf")
        try:
            wait_for(lambda: load.calls() > 100, 30, f"proxyless calls ({load.output[-3:]})")
            leader.kill()
            at_kill = load.calls()
            # The client keeps calling the replicas it knows while no controller leads.
            wait_for(lambda: load.calls() > at_kill + 300, 30, "calls after the crash")
            new = etcd_fleet.leader(timeout=30)
            assert new is not leader
            # It reaches the new leader (directly or through a relay) and picks up a change.
            client.deploy(_model(3))
            wait_for(lambda: len(_running_pids(client)) == 3, 60, "3 replicas running")
            before = dict(load.last["replicas"])
            wait_for(lambda: set(load.since(before)) == _running_pids(client), 15,
                     "calls reaching the replica started by the new leader")
        finally:
            load.stop()
            with contextlib.suppress(Exception):
                client.shutdown()
    print(f"leader crash under proxyless load: {load.calls()} calls, "
          f"failed: {load.last['failed'][:5]}")
    assert load.last["failed"] == []


def test_a_client_with_a_certificate_reaches_a_controller_with_mutual_tls(tmp_path) -> None:
    certs = tmp_path / "certs"
    init_certs(certs)
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", certs=certs,
                                   log_dir=tmp_path, runtime="process",
                                   extra_args=["--allow-working-dir", "/"]).start()
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=controller.credentials) as client:
            client.deploy(_model(2))
            wait_for(lambda: len(_running_pids(client)) == 2, 60, "2 replicas running")
            # A client without a certificate is refused at the TLS handshake.
            plain = XdsLoad([controller.address], "clf", callers=1)
            # Replicas on loopback serve plain text (--replica-tls auto): the
            # client shows a hop pass for its certificate with each call.
            hop_pass = getattr(ControllerClient([controller.address], credentials=Credentials(
                TlsFiles.from_dir(certs, "proxy"))).hop_pass(), "pass")
            load = XdsLoad([controller.address], "clf", ca=str(certs / "ca.crt"),
                           cert=str(certs / "proxy.crt"), key=str(certs / "proxy.key"),
                           hop_pass=hop_pass)
            try:
                wait_for(lambda: set(load.last["replicas"]) == _running_pids(client), 30,
                         f"proxyless calls over TLS reaching both replicas ({load.output[-3:]})")
                # Its calls fail once their deadline passes (10 s; seen in CI: not
                # yet by the time the other client was served).
                wait_for(lambda: plain.last["failed"], 30, "the plain client's calls failing")
                assert plain.calls() == 0
            finally:
                load.stop()
                plain.stop()
            client.shutdown()
    finally:
        controller.stop()
    assert load.last["failed"] == []
