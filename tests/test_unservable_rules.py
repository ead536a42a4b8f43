"""Which deployments and applications cannot serve, and what their requests
are told (controller/unservable.py), and the pool's refusal (pure)."""

from __future__ import annotations

import asyncio

import pytest

from servefleet._private.dataplane.balancer import ReplicaPool, Unservable
from servefleet._private.messages import error_summary
from servefleet.controller.unservable import application_unavailable, deployment_unavailable
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import records_pb2, status_pb2

FAILED = status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED
TRACE = ("Traceback (most recent call last):\n  File \"m.py\", line 1, in <module>\n"
         "    raise RuntimeError('x')\nRuntimeError: model file missing\n")


@pytest.mark.parametrize(("text", "summary"), [
    ("replicas failed 3 times. Last error: RuntimeError: gone\n" + TRACE,
     "replicas failed 3 times. Last error: RuntimeError: gone"),
    (TRACE, "RuntimeError: model file missing"),
    ("one line", "one line"),
    ("", ""),
    ("x" * 5000, "x" * 997 + "..."),
])
def test_an_error_is_summarised_in_one_line(text: str, summary: str) -> None:
    assert error_summary(text) == summary


def record(num_replicas: int = 1, autoscaled: bool = False) -> records_pb2.DeploymentRecord:
    config = dpb.ReplicaConfig(num_replicas=num_replicas)
    if autoscaled:
        config.autoscaling_config.CopyFrom(dpb.AutoscalingConfig(min_replicas=0, max_replicas=2))
    return records_pb2.DeploymentRecord(spec=dpb.DeploymentSpec(
        name="Model", application="app", replica_config=config))


def test_a_deployment_cannot_serve_only_when_no_replica_can_come() -> None:
    failed = (FAILED, "replicas failed to start 3 times. Last error: ValueError: bad\n" + TRACE)
    text = deployment_unavailable(record(), failed, serving=0)
    assert text.startswith("application app cannot serve: deployment Model is DEPLOY_FAILED: ")
    assert "ValueError: bad" in text and "Traceback" not in text
    assert deployment_unavailable(record(), failed, serving=1) == ""  # an old version serves
    updating = (status_pb2.DEPLOYMENT_STATUS_UPDATING, "starting")
    assert deployment_unavailable(record(), updating, serving=0) == ""  # one may come
    assert deployment_unavailable(record(), None, serving=0) == ""  # not planned yet
    assert "num_replicas 0" in deployment_unavailable(record(0), updating, serving=0)
    # Scaled to zero by the autoscaler: a request brings a replica back.
    assert deployment_unavailable(record(0, autoscaled=True), updating, serving=0) == ""


def test_an_application_cannot_serve_when_its_first_build_failed() -> None:
    spec = apb.ApplicationSpec(name="web", import_path="m:app")
    never = apb.ApplicationRecord(spec=spec, generation=1, failed_generation=1,
                                  build_error=TRACE)
    assert application_unavailable(never) == (
        "application web is DEPLOY_FAILED: its build failed: RuntimeError: model file "
        "missing (servefleet status web has all of it)")
    # An earlier build still serves, or the failure is of an older generation.
    earlier = apb.ApplicationRecord(spec=spec, generation=2, applied_generation=1,
                                    failed_generation=2, build_error=TRACE)
    assert application_unavailable(earlier) == ""
    newer = apb.ApplicationRecord(spec=spec, generation=2, failed_generation=1,
                                  build_error=TRACE)
    assert application_unavailable(newer) == ""


async def test_a_pool_refuses_and_fails_its_queue_when_no_replica_can_come() -> None:
    pool = ReplicaPool()
    queued = asyncio.create_task(pool.acquire())
    await asyncio.sleep(0.01)
    assert not queued.done()
    pool.update([], max_ongoing=1, max_queued=-1, unavailable="it failed to deploy")
    with pytest.raises(Unservable, match="it failed to deploy"):
        await queued
    with pytest.raises(Unservable, match="it failed to deploy"):
        await pool.acquire()
    # A replica set with replicas lifts the refusal, whatever it says.
    pool.update([("a", "h:1")], max_ongoing=1, max_queued=-1, unavailable="stale")
    assert (await pool.acquire()).replica_id == "a"
