"""A deployment's status right after a failover, before the new leader's
first reconcile pass: its replicas are RECOVERING (found running, adopted,
not yet checked), and proxies keep sending them traffic. The status must
not flip from HEALTHY to UPDATING (and its application from RUNNING to
DEPLOYING) for that moment: the Node client's failover test caught it."""

from __future__ import annotations

from servefleet.controller.api.status import application_status, deployment_status
from servefleet.v1 import deployment_pb2, records_pb2, status_pb2

DS = status_pb2.DeploymentStatus


def record(replicas: int) -> records_pb2.DeploymentRecord:
    return records_pb2.DeploymentRecord(spec=deployment_pb2.DeploymentSpec(
        name="hello", application="node",
        replica_config=deployment_pb2.ReplicaConfig(num_replicas=replicas)))


def test_replicas_recovered_after_a_failover_keep_the_deployment_healthy() -> None:
    info = deployment_status(record(2), ({"RECOVERING": 1, "RUNNING": 1}, None, None))
    assert info.status == DS.DEPLOYMENT_STATUS_HEALTHY and info.message == ""
    app = application_status("node", [info])
    assert app.status == status_pb2.APPLICATION_STATUS_RUNNING


def test_missing_or_starting_replicas_still_make_it_updating() -> None:
    short = deployment_status(record(2), ({"RECOVERING": 1}, None, None))
    assert short.status == DS.DEPLOYMENT_STATUS_UPDATING
    assert short.message == "1 of 2 replicas running"
    starting = deployment_status(record(1), ({"RECOVERING": 1, "STARTING": 1}, None, None))
    assert starting.status == DS.DEPLOYMENT_STATUS_UPDATING
