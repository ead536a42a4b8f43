"""A handler that blocks its replica's event loop does not get the replica
replaced (issue 51): `time.sleep(5)` inside `async def`, and a 48 MB JSON
body parsed by one deployment and handed to another. The controller's
checks are answered from the replica's control loop, a thread of its own,
and the replica says which handler held its loop, for how long, and what to
do instead."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from servefleet._private.testing import wait_for
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2

APPS = str(Path(__file__).parent / "apps")
RUNNING = replica_pb2.REPLICA_STATE_RUNNING


def running_ids(client, deployment: str = "") -> set[str]:
    return {r.record.replica_id for r in client.replicas(deployment=deployment)
            if r.state == RUNNING}


def log_lines(client, deployment: str) -> list[str]:
    return [line for chunk in client.logs(deployment=deployment, tail_lines=200)
            for line in chunk.lines]


@pytest.mark.slow
def test_a_handler_that_blocks_its_loop_keeps_its_replica(served) -> None:
    """One replica; a request that holds its loop for 5 s (the proxy
    sees a lone replica answer nothing for seconds and reports it as a
    suspect): it answers 200, the controller's check of the suspect passes,
    and the same replica serves after; its log names the handler."""
    client, proxy = served
    client.deploy(d.DeploymentSpec(
        name="Blocking", import_path="blocking_app:Blocking", route_prefix="/block",
        runtime=d.RuntimeOptions(working_dir=APPS),
        replica_config=d.ReplicaConfig(num_replicas=1)))
    p = proxy()
    wait_for(lambda: len(running_ids(client)) == 1, 60, "the replica RUNNING")
    (before,) = running_ids(client)
    wait_for(lambda: httpx.get(p.url + "/block?s=0", timeout=5).status_code == 200, 30,
             "the route")
    answer = httpx.get(p.url + "/block?s=5", timeout=30)
    assert answer.status_code == 200, answer.text
    # Whatever the proxy reported is checked within a report period or two.
    time.sleep(4)
    assert running_ids(client) == {before}
    assert httpx.get(p.url + "/block?s=0", timeout=5).status_code == 200
    lines = log_lines(client, "Blocking")
    warned = [line for line in lines if "blocked" in line and "event loop" in line]
    assert warned, "\n".join(lines[-40:])
    assert "Blocking.__call__" in warned[0] and "blocking_app.py" in warned[0]
    assert "def" in warned[0] and "executor" in warned[0]


@pytest.mark.slow
def test_a_large_body_through_two_deployments_keeps_both(served) -> None:
    """A 48 MB JSON body to an application of two deployments (one replica
    each): parsed by Front, handed to Counter through a handle. It answers,
    and neither replica is replaced."""
    client, proxy = served
    client.deploy_applications([apb.ApplicationSpec(
        name="big", import_path="blocking_app:big", route_prefix="/big",
        runtime=d.RuntimeOptions(working_dir=APPS))])
    p = proxy()
    wait_for(lambda: len(running_ids(client)) == 2, 60, "both replicas RUNNING")
    before = running_ids(client)
    wait_for(lambda: httpx.post(p.url + "/big", json=[[1]], timeout=5).status_code == 200,
             30, "the route")
    # Many short rows: the costliest shape to parse and to pickle per byte
    # (seconds each on this machine's cores).
    rows = [[0, 1, 2, 3]] * 3_500_000
    body = json.dumps(rows).encode()
    assert len(body) > 48_000_000
    answer = httpx.post(p.url + "/big", content=body,
                        headers={"content-type": "application/json"}, timeout=120)
    assert answer.status_code == 200, answer.text[:2000]
    assert answer.json() == {"cells": 14_000_000}
    time.sleep(4)
    assert running_ids(client) == before, "replaced"
    # Parsing the body held Front's loop for seconds, and it said so.
    assert any("event loop was blocked" in line for line in log_lines(client, "Front"))
