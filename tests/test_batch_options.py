"""@batch's other options (servefleet/_private/batching/batch.py, batch_queue.py): batch_size_fn,
max_concurrent_batches, keyword arguments, model ids; pure asyncio."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI

from servefleet import batch
from servefleet._private.applications.ingress import ingress
from servefleet._private.batching.batch import batch_sizes
from servefleet._private.batching.multiplex import MODEL_ID, get_multiplexed_model_id


def total_length(items: list[str]) -> int:
    return sum(len(item) for item in items)


class Tokens:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    @batch(max_batch_size=10, batch_wait_timeout_s=0.05, batch_size_fn=total_length)
    async def run(self, texts: list[str]) -> list[int]:
        self.batches.append(list(texts))
        return [len(t) for t in texts]


async def queued(*calls) -> list:
    """Start the calls in order, each queued before the next starts."""
    tasks = []
    for call in calls:
        tasks.append(asyncio.ensure_future(call))
        await asyncio.sleep(0)
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_batch_size_fn_sizes_batches_by_their_inputs() -> None:
    model = Tokens()
    results = await queued(*(model.run(t) for t in ("aaaa", "bbbb", "cc", "ddddd", "e")))
    assert results == [4, 4, 2, 5, 1]
    # 4+4+2 fills 10 at once; "ddddd" does not fit and leads the next batch.
    assert model.batches == [["aaaa", "bbbb", "cc"], ["ddddd", "e"]]


async def test_an_input_over_the_limit_alone_fails_and_the_rest_go_on() -> None:
    model = Tokens()
    results = await queued(model.run("x" * 11), model.run("ok"))
    assert isinstance(results[0], RuntimeError)
    assert "sizes this input at 11, more than max_batch_size (10)" in str(results[0])
    assert results[1] == 2 and model.batches == [["ok"]]


async def test_a_broken_batch_size_fn_fails_the_waiting_calls_with_its_error() -> None:
    def not_a_size(items: list) -> int:
        return "many"  # type: ignore[return-value]

    @batch(batch_size_fn=not_a_size)
    async def echo(xs: list[int]) -> list[int]:
        return xs

    results = await queued(echo(1), echo(2))
    assert all(isinstance(r, TypeError) and "returned 'many', not an integer" in str(r)
               for r in results)


async def test_max_concurrent_batches_lets_batches_overlap() -> None:
    running = peak = 0

    async def work(xs: list[int]) -> list[int]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)
        running -= 1
        return xs

    one = batch(max_batch_size=2, batch_wait_timeout_s=0)(work)
    two = batch(max_batch_size=2, batch_wait_timeout_s=0, max_concurrent_batches=2)(work)
    assert await queued(*(one(i) for i in range(6))) == list(range(6))
    assert peak == 1
    peak = 0
    assert await queued(*(two(i) for i in range(6))) == list(range(6))
    assert peak == 2


async def test_keyword_arguments_are_batched_by_name() -> None:
    @batch(max_batch_size=3, batch_wait_timeout_s=0.05)
    async def scale(xs: list[int], *, factor: list[int]) -> list[int]:
        return [x * f for x, f in zip(xs, factor, strict=True)]

    assert await queued(scale(1, factor=2), scale(2, factor=3), scale(3, factor=4)) == [
        2, 6, 12]
    mixed = await queued(scale(1, factor=2), scale(2, factor=2, extra=1))
    assert all(isinstance(r, TypeError) and "same keyword arguments" in str(r) for r in mixed)


async def test_calls_for_different_models_go_in_separate_calls() -> None:
    seen: list[tuple[str, list[int]]] = []

    @batch(max_batch_size=4, batch_wait_timeout_s=0.05)
    async def predict(xs: list[int]) -> list[str]:
        model = get_multiplexed_model_id()
        seen.append((model, list(xs)))
        return [f"{model}:{x}" for x in xs]

    async def for_model(model: str, x: int) -> str:
        MODEL_ID.set(model)
        return await predict(x)

    assert await queued(for_model("a", 1), for_model("b", 2), for_model("a", 3)) == [
        "a:1", "b:2", "a:3"]
    assert sorted(seen) == [("a", [1, 3]), ("b", [2])]


def test_settings_are_checked_and_read_as_ray_reads_them() -> None:
    with pytest.raises(ValueError, match="max_concurrent_batches must be an integer >= 1"):
        batch(max_concurrent_batches=0)
    with pytest.raises(TypeError, match=r"batch_size_fn must be a function .* got int"):
        batch(batch_size_fn=3)  # type: ignore[arg-type]

    @batch(max_batch_size=4.0, max_concurrent_batches=3)  # type: ignore[arg-type]
    async def f(xs: list[int]) -> list[int]:
        return xs

    assert (f.max_batch_size, f.max_concurrent_batches) == (4, 3)
    assert (f._get_max_batch_size(), f._get_batch_wait_timeout_s()) == (4, 0.01)
    f.set_max_batch_size(6.0)  # type: ignore[arg-type]
    assert f.max_batch_size == 6


def test_batch_sizes_sees_batch_methods_of_an_ingress_class() -> None:
    app = FastAPI()

    @ingress(app)
    class Served:
        @batch(max_batch_size=7)
        async def predict(self, xs: list[int]) -> list[int]:
            return xs

    assert batch_sizes(Served) == {"predict": 7}
    assert batch_sizes(Tokens()) == {"run": 10}
