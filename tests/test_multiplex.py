"""Model multiplexing: the per-replica LRU (pure asyncio), model-aware routing
(the balancer, pure), and both for real through a proxy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from servefleet import get_multiplexed_model_id, multiplexed
from servefleet._private.batching.multiplex import MODEL_ID, loaded_model_ids
from servefleet._private.dataplane.balancer import ReplicaPool


class Model:
    def __init__(self, name: str, unloaded: list[str]) -> None:
        self.name, self._unloaded = name, unloaded

    async def aclose(self) -> None:  # async cleanup, awaited on eviction
        self._unloaded.append(self.name)


class Host:
    def __init__(self) -> None:
        self.loads: list[str] = []
        self.unloaded: list[str] = []

    @multiplexed(max_num_models_per_replica=2)
    async def get_model(self, model_id: str) -> Model:
        self.loads.append(model_id)
        await asyncio.sleep(0.01)
        return Model(model_id, self.unloaded)


async def test_an_lru_of_models_per_replica() -> None:
    host = Host()
    for model_id in ("a", "b", "a", "c", "a", "b"):
        assert (await host.get_model(model_id)).name == model_id
    # c evicted b (least recently used); b evicted c.
    assert host.loads == ["a", "b", "c", "b"] and host.unloaded == ["b", "c"]
    assert {"a", "b"} <= set(loaded_model_ids())  # (the process may hold others)
    # Concurrent requests for one model wait for one load.
    other = Host()
    await asyncio.gather(*[other.get_model("x") for _ in range(5)])
    assert other.loads == ["x"]
    with pytest.raises(ValueError, match="non-empty string"):
        await host.get_model("")
    token = MODEL_ID.set("m1")
    assert get_multiplexed_model_id() == "m1"
    MODEL_ID.reset(token)
    with pytest.raises(TypeError, match="must be an async def"):
        multiplexed(lambda self, model_id: None)


def _pool(count: int = 4) -> ReplicaPool:
    pool = ReplicaPool(max_ongoing=2)
    pool.update([(f"r{i}", f"h:{i}") for i in range(count)], max_ongoing=2, max_queued=-1)
    return pool


async def test_routing_prefers_holders_then_agrees_across_routers() -> None:
    one, two = _pool(), _pool()
    # Nobody holds "m": both routers choose the same replica.
    first = await one.acquire(model_id="m")
    assert (await two.acquire(model_id="m")).replica_id == first.replica_id
    one.release(first)
    # A holder is preferred, even when it is not the hash's choice.
    other = next(r for r in one.replicas.values() if r.replica_id != first.replica_id)
    one.note_models(other, b"m,n")
    assert (await one.acquire(model_id="m")).replica_id == other.replica_id
    # A replica holding fewer models is preferred for a model nobody holds.
    picks = {(await one.acquire(model_id=f"new{i}")).replica_id for i in range(3)}
    assert other.replica_id not in picks
    # When the holder is full, the model spreads to another replica.
    full = await one.acquire(model_id="m")
    assert full.replica_id == other.replica_id and other.in_flight == 2
    assert (await one.acquire(model_id="m")).replica_id != other.replica_id


async def test_a_queued_request_for_a_model_goes_to_a_holder_when_slots_free() -> None:
    for _ in range(20):  # without the model in mind, half of these would go elsewhere
        pool = _pool(2)
        holder = pool.replicas["r0"]
        pool.note_models(holder, b"m")
        for _ in range(4):
            await pool.acquire()  # both replicas full
        waiting = asyncio.ensure_future(pool.acquire(model_id="m"))
        await asyncio.sleep(0)
        # Room appears on both at once (a snapshot raises max_ongoing_requests).
        pool.update([("r0", "h:0"), ("r1", "h:1")], max_ongoing=3, max_queued=-1)
        assert (await waiting) is holder


@pytest.mark.slow
def test_requests_go_where_their_model_is_loaded(sqlite_fleet, tmp_path) -> None:
    import httpx

    from servefleet._private.testing import ProxyProcess, wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import deployment_pb2 as d

    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path).start()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        try:
            client.deploy(d.DeploymentSpec(
                name="Models", import_path="multiplex_app:Models", route_prefix="/m",
                runtime=d.RuntimeOptions(working_dir=str(Path(__file__).parent / "apps")),
                replica_config=d.ReplicaConfig(num_replicas=2)))
            url = proxy.url + "/m"
            wait_for(lambda: len([r for r in client.replicas() if r.state == 2]) == 2, 60,
                     "2 replicas")
            wait_for(lambda: httpx.get(url, headers={"serve_multiplexed_model_id": "a"},
                                       timeout=5).status_code == 200, 30, "the route")
            answers = [httpx.get(url, headers={"serve_multiplexed_model_id": m},
                                 timeout=10).json() for m in "abcdabcdabcdbadc" * 3]
            # Each model is loaded once (2 replicas x 2 models hold the 4): every
            # later request went where its model was.
            loads = {a["replica"]: a["loads"] for a in answers}
            assert sum(loads.values()) <= 5, answers  # 4, or 5 if the first probe's "a" moved
            by_model = {m: {a["replica"] for a in answers if a["model"] == m} for m in "abcd"}
            assert all(len(replicas) == 1 for replicas in by_model.values()), by_model
        finally:
            proxy.stop()
            client.shutdown()
