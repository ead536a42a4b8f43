"""A new term probes the replicas it found a bounded number at a time
(reconcile/replicas.py, MAX_ADOPTION_PROBES): a unit test under a fake clock,
runtime and replica client."""

from __future__ import annotations

import asyncio

import pytest
from fakes import FakeControlPlane

from servefleet.controller.reconcile.planner import RUNNING
from servefleet.controller.reconcile.replicas import MAX_ADOPTION_PROBES
from servefleet.v1 import deployment_pb2 as d


def spec(name: str, replicas: int) -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="m:C",
                            replica_config=d.ReplicaConfig(num_replicas=replicas))


@pytest.fixture
async def world():
    w = FakeControlPlane()
    yield w
    await w.close()


async def test_found_replicas_are_probed_a_bounded_number_at_a_time(world) -> None:
    found = 2 * MAX_ADOPTION_PROBES + 10
    term = await world.lead()
    await term.deployments.deploy(spec("big", found))
    await world.settle(term, ticks=10, step_s=0.1)
    old = {r.record.control_address for r in term.observed.serving("default", "big")}
    assert len(old) == found

    answer = asyncio.Event()
    asked: list[str] = []
    metadata = world.client.metadata

    async def held(address: str, timeout: float):
        asked.append(address)
        await answer.wait()
        return await metadata(address, timeout)

    world.client.metadata = held  # type: ignore[method-assign]
    term = await world.lead()  # a new term finds them all RECOVERING
    await term.deployments.deploy(spec("new", 1))
    for _ in range(10):
        world.clock.advance(0.1)
        await term.loop.run_pass()
        await asyncio.sleep(0.01)  # the new replica's start (store, runtime) goes on
    assert len([a for a in asked if a in old]) == MAX_ADOPTION_PROBES
    assert [a for a in asked if a not in old], "the new replica's probe waited too"

    answer.set()
    await world.settle(term, ticks=10, step_s=0.1)
    states = [r.view.state for r in term.observed.deployments[("default", "big")].replicas]
    assert states == [RUNNING] * found
