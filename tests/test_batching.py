"""@servefleet.batch (pure asyncio, no servers)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from servefleet import batch
from servefleet._private.batching.batch import batch_sizes


class Model:
    def __init__(self) -> None:
        self.sizes: list[int] = []

    @batch(max_batch_size=8, batch_wait_timeout_s=0.05)
    async def double(self, xs: list[int]) -> list[int]:
        self.sizes.append(len(xs))
        await asyncio.sleep(0.01)
        return [2 * x for x in xs]

    @batch(max_batch_size=4, batch_wait_timeout_s=0.01)
    async def pairs(self, a: list[int], b: list[str]) -> list[str]:
        return [f"{x}{y}" for x, y in zip(a, b, strict=True)]

    @batch(max_batch_size=4, batch_wait_timeout_s=0.01)
    async def broken(self, xs: list[int]) -> list[int]:
        if 0 in xs:
            raise ValueError("zero is not allowed")
        return xs[:-1]  # one output short


async def test_concurrent_calls_become_full_batches_and_each_caller_gets_its_own() -> None:
    model = Model()
    results = await asyncio.gather(*[model.double(i) for i in range(16)])
    assert results == [2 * i for i in range(16)]
    assert model.sizes == [8, 8]
    assert await model.pairs(1, "a") == "1a"  # positional arguments line up


async def test_the_timeout_sends_a_partial_batch() -> None:
    model = Model()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await asyncio.gather(*[model.double(i) for i in range(3)]) == [0, 2, 4]
    assert model.sizes == [3] and loop.time() - started >= 0.05


async def test_errors_and_wrong_lengths_fail_the_whole_batch() -> None:
    model = Model()
    raised = await asyncio.gather(*[model.broken(x) for x in (0, 1, 2)],
                                  return_exceptions=True)
    assert all(isinstance(e, ValueError) and str(e) == "zero is not allowed" for e in raised)
    short = await asyncio.gather(*[model.broken(x) for x in (1, 2)], return_exceptions=True)
    assert all(isinstance(e, ValueError) and "returned 1 outputs for a batch of 2 inputs"
               in str(e) for e in short)


async def test_any_sequence_of_the_batchs_length_is_split_per_caller() -> None:
    """Ray's documentation returns `np.array(batch) * 2`: any sequence of the
    batch's length goes, one element per caller; what is not one (a scalar,
    a string, a mapping, a 0-d array) or is one of the wrong length fails
    every call with a ValueError naming it."""
    import numpy as np

    @batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def doubled(xs: list[int]) -> np.ndarray:
        return np.array(xs) * 2

    assert await asyncio.gather(*[doubled(i) for i in range(4)]) == [0, 2, 4, 6]

    @batch(max_batch_size=3, batch_wait_timeout_s=0.05)
    async def rows(xs: list[int]) -> np.ndarray:
        return np.stack([np.full(2, x) for x in xs])  # one row per caller

    got = await asyncio.gather(*[rows(i) for i in range(3)])
    assert [r.tolist() for r in got] == [[0, 0], [1, 1], [2, 2]]

    @batch(max_batch_size=2, batch_wait_timeout_s=0.05)
    async def paired(xs: list[int]) -> tuple[int, ...]:
        return tuple(x + 1 for x in xs)

    assert list(await asyncio.gather(paired(1), paired(2))) == [2, 3]

    for wrong, said in [(np.array([1, 2, 3]), "returned 3 outputs for a batch of 2"),
                        (np.int64(4), "returned a int64 for a batch of 2"),
                        (np.array(5), "returned a ndarray for a batch of 2"),
                        ("ab", "returned a str for a batch of 2"),
                        ({0: "a", 1: "b"}, "returned a dict for a batch of 2"),
                        ((x for x in "ab"), "returned a generator for a batch of 2")]:
        @batch(max_batch_size=2, batch_wait_timeout_s=0.05)
        async def bad(xs: list[int], wrong=wrong) -> object:
            return wrong

        failed = await asyncio.gather(bad(1), bad(2), return_exceptions=True)
        assert all(isinstance(e, ValueError) and said in str(e)
                   and "it must return a sequence" in str(e) for e in failed), (said, failed)


async def test_a_cancelled_caller_does_not_break_the_others() -> None:
    model = Model()
    waiting = [asyncio.ensure_future(model.double(i)) for i in range(3)]
    await asyncio.sleep(0)
    waiting[1].cancel()  # leaves the queue before its batch goes
    assert await waiting[0] == 0 and await waiting[2] == 4
    assert model.sizes == [2]
    running = [asyncio.ensure_future(model.double(i)) for i in range(8)]
    await asyncio.sleep(0.005)  # the batch of 8 is running now
    running[3].cancel()
    results = await asyncio.gather(*running, return_exceptions=True)
    assert isinstance(results[3], asyncio.CancelledError)
    assert [r for i, r in enumerate(results) if i != 3] == [0, 2, 4, 8, 10, 12, 14]


async def test_settings_change_at_run_time_per_instance() -> None:
    one, two = Model(), Model()
    one.double.set_max_batch_size(2)
    one.double.set_batch_wait_timeout_s(0.2)
    await asyncio.gather(*[one.double(i) for i in range(6)], *[two.double(i) for i in range(6)])
    assert one.sizes == [2, 2, 2] and two.sizes == [6]
    assert (one.double.max_batch_size, two.double.max_batch_size) == (2, 8)
    with pytest.raises(ValueError, match="max_batch_size must be an integer >= 1, got 0"):
        one.double.set_max_batch_size(0)
    assert batch_sizes(Model) == {"double": 8, "pairs": 4, "broken": 4}


async def test_a_function_can_batch_and_bad_targets_are_refused() -> None:
    seen: list[int] = []

    @batch(max_batch_size=5, batch_wait_timeout_s=0.01)
    async def square(xs: list[int]) -> list[int]:
        seen.append(len(xs))
        return [x * x for x in xs]

    assert await asyncio.gather(*[square(i) for i in range(5)]) == [0, 1, 4, 9, 16]
    assert seen == [5]
    with pytest.raises(TypeError, match="must be a function that gets a list"):
        @batch
        def gen(xs):
            yield xs
    with pytest.raises(ValueError, match="batch_wait_timeout_s must be a number >= 0"):
        batch(batch_wait_timeout_s=-1)


@pytest.mark.slow
def test_requests_through_a_proxy_are_batched(sqlite_fleet, tmp_path) -> None:
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
                name="Batcher", import_path="batch_app:Batcher", route_prefix="/b",
                runtime=d.RuntimeOptions(working_dir=apps),
                replica_config=d.ReplicaConfig(max_ongoing_requests=16)))
            url = proxy.url + "/b"
            wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, 60, "the route")

            async def burst() -> list[dict]:
                async with httpx.AsyncClient(timeout=30) as http:
                    replies = await asyncio.gather(*[http.get(url, params={"text": str(i)})
                                                     for i in range(16)])
                return [r.json() for r in replies]

            answers = asyncio.run(burst())
            assert [a["text"] for a in answers] == [str(i) for i in range(16)]
            assert max(a["batch"] for a in answers) > 1, answers
            assert all(a["batch"] <= 8 for a in answers)
            # Alone, a request waits out the timeout and goes as a batch of one.
            assert httpx.get(url, params={"text": "solo"}, timeout=10).json()["batch"] == 1
        finally:
            proxy.stop()
            client.shutdown()


def test_a_plain_def_batches_calls_from_threads_and_runs_off_the_loop() -> None:
    """Ray's newer sync form: callers in threads (as a replica runs plain
    methods) block on their own item; the batch runs in a thread."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    seen: list[tuple[int, str]] = []

    class Model:
        @batch(max_batch_size=4, batch_wait_timeout_s=0.2)
        def double(self, xs: list[int]) -> list[int]:
            seen.append((len(xs), threading.current_thread().name))
            return [x * 2 for x in xs]

    model = Model()
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(model.double, range(4))) == [0, 2, 4, 6]
    assert [size for size, _ in seen] == [4]
    assert seen[0][1] != "servefleet-handles"  # not on the loop's thread

    async def from_async() -> None:
        with pytest.raises(RuntimeError, match="plain def: call it from sync code"):
            model.double(1)

    asyncio.run(from_async())
