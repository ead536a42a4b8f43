"""Streaming batch methods: an `async def` generator under @batch
(servefleet/_private/batching/batch.py); pure asyncio, then HTTP streams through a real proxy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from servefleet import batch


class Generator:
    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.closed = 0

    @batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def count(self, limits: list[int]) -> AsyncIterator[list]:
        self.sizes.append(len(limits))
        try:
            for step in range(max(limits)):
                yield [step if step < n else StopIteration for n in limits]
                await asyncio.sleep(0.005)
        finally:
            self.closed += 1

    @batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def breaks(self, xs: list[int]) -> AsyncIterator[list]:
        yield [x * 10 for x in xs]
        if 0 in xs:
            raise ValueError("zero")
        yield xs[:-1]  # one item short


async def collect(stream: AsyncIterator) -> list:
    return [item async for item in stream]


async def collect_all(*streams: AsyncIterator) -> list:
    """Iterate the streams concurrently, each started before the next."""
    tasks = []
    for stream in streams:
        tasks.append(asyncio.ensure_future(collect(stream)))
        await asyncio.sleep(0)
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_each_caller_streams_its_own_items_and_ends_on_its_sentinel() -> None:
    model = Generator()
    got = await collect_all(*(model.count(n) for n in (3, 1, 5, 0)))
    assert got == [[0, 1, 2], [0], [0, 1, 2, 3, 4], []]
    assert model.sizes == [4] and model.closed == 1
    # StopIteration instances work as the class does.

    @batch(max_batch_size=2, batch_wait_timeout_s=0.05)
    async def short(xs: list[int]) -> AsyncIterator[list]:
        yield [StopIteration(), StopAsyncIteration]
        yield ["never", "never"]

    assert await collect_all(short(1), short(2)) == [[], []]


async def test_a_step_may_be_any_sequence_of_the_batchs_length() -> None:
    """A step as a numpy array or a tuple is split per caller, as a result is."""
    import numpy as np

    @batch(max_batch_size=3, batch_wait_timeout_s=0.05)
    async def scaled(xs: list[int]) -> AsyncIterator[Any]:
        yield np.array(xs) * 10
        yield tuple(xs)

    assert await collect_all(scaled(1), scaled(2), scaled(3)) == [[10, 1], [20, 2], [30, 3]]


async def test_an_error_reaches_every_open_stream_after_its_items() -> None:
    model = Generator()
    first = await collect_all(model.breaks(0), model.breaks(1))
    assert all(isinstance(r, ValueError) and str(r) == "zero" for r in first)
    short = await collect_all(model.breaks(1), model.breaks(2))
    assert all(isinstance(r, ValueError) and "yielded 1 outputs for a batch of 2" in str(r)
               for r in short)

    async def items_then_error(stream: AsyncIterator) -> tuple[list, str]:
        seen = []
        try:
            async for item in stream:
                seen.append(item)
        except ValueError as e:
            return seen, str(e)
        return seen, ""

    done = await asyncio.gather(items_then_error(model.breaks(0)),
                                items_then_error(model.breaks(4)))
    assert list(done) == [([0], "zero"), ([40], "zero")]


async def test_a_caller_that_leaves_does_not_stop_the_others() -> None:
    model = Generator()
    leaving = model.count(100)
    staying = asyncio.ensure_future(collect(model.count(6)))
    assert await anext(leaving) == 0
    await leaving.aclose()  # the client went away after one item
    assert await staying == [0, 1, 2, 3, 4, 5]
    # Everyone gone: the generator is closed instead of running its 100 steps.
    lone = model.count(1000)
    assert await anext(lone) == 0
    await lone.aclose()
    for _ in range(50):
        if model.closed == 2:
            break
        await asyncio.sleep(0.01)
    assert model.closed == 2


async def test_a_caller_cancelled_before_its_batch_leaves_the_queue() -> None:
    model = Generator()
    waiting = asyncio.ensure_future(collect(model.count(2)))
    await asyncio.sleep(0)
    waiting.cancel()
    assert await collect(model.count(2)) == [0, 1]
    assert model.sizes == [1]


@pytest.mark.slow
def test_streaming_batches_serve_concurrent_http_streams(sqlite_fleet, tmp_path) -> None:
    import httpx

    from servefleet._private.testing import ProxyProcess, wait_for
    from servefleet.client import ControllerClient
    from servefleet.v1 import deployment_pb2 as d

    apps = str(Path(__file__).resolve().parent / "apps")
    sqlite_fleet.start(1, runtime="process")
    sqlite_fleet.leader()
    proxy = ProxyProcess(sqlite_fleet.addresses(), log_dir=tmp_path).start()
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        try:
            client.deploy(d.DeploymentSpec(
                name="Streamer", import_path="stream_batch_app:Streamer", route_prefix="/s",
                runtime=d.RuntimeOptions(working_dir=apps),
                replica_config=d.ReplicaConfig(max_ongoing_requests=16)))
            url = proxy.url + "/s"
            wait_for(lambda: httpx.get(url, params={"n": 1}, timeout=5).status_code == 200,
                     60, "the route")

            async def stream(http: httpx.AsyncClient, n: int) -> list[str]:
                async with http.stream("GET", url, params={"n": n}) as response:
                    assert response.status_code == 200
                    return [line async for line in response.aiter_lines() if line]

            async def burst() -> list[list[str]]:
                async with httpx.AsyncClient(timeout=30) as http:
                    return await asyncio.gather(*(stream(http, n) for n in range(1, 7)))

            answers = asyncio.run(burst())
            for n, lines in zip(range(1, 7), answers, strict=True):
                assert [line.split("/")[0] for line in lines] == [f"{n}:{s}" for s in range(n)]
            sizes = {int(line.split("/")[1]) for lines in answers for line in lines}
            assert max(sizes) > 1, answers  # streams shared batches
        finally:
            proxy.stop()
            client.shutdown()
