"""@batch by token budget (batching.py's sort_key with batch_size_fn measuring
padded tokens): similar lengths batched together, the oldest call always in
the next batch, the budget kept; pure asyncio."""

from __future__ import annotations

import asyncio

import pytest

from servefleet import batch


def padded(items: list[str]) -> int:
    """What a batch costs a transformer: every input padded to the longest."""
    return len(items) * max(len(item) for item in items)


HOLD = "h" * 12  # a full batch alone, held until the test lets it go


class Budget:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.gate = asyncio.Event()

    @batch(max_batch_size=12, batch_wait_timeout_s=0.05, batch_size_fn=padded, sort_key=len)
    async def run(self, texts: list[str]) -> list[int]:
        if texts == [HOLD]:
            await self.gate.wait()
        else:
            self.batches.append(list(texts))
        return [len(t) for t in texts]


async def queued(*calls) -> list:
    """Start the calls in order, each queued before the next starts."""
    tasks = []
    for call in calls:
        tasks.append(asyncio.ensure_future(call))
        await asyncio.sleep(0)
    return await asyncio.gather(*tasks, return_exceptions=True)


async def behind_a_batch(model: Budget, texts: list[str]) -> list:
    """The texts queued while a batch runs (as under load: one batch at a
    time), so the next batches form from all of them."""
    held = asyncio.ensure_future(model.run(HOLD))
    await asyncio.sleep(0.01)
    tasks = []
    for text in texts:
        tasks.append(asyncio.ensure_future(model.run(text)))
        await asyncio.sleep(0)
    model.gate.set()
    await held
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_similar_lengths_go_together_within_the_padded_budget() -> None:
    model = Budget()
    texts = ["aaaaaa", "b", "cccccc", "d", "e", "ffff", "g"]
    results = await behind_a_batch(model, texts)
    assert results == [len(t) for t in texts]  # each caller its own answer
    # The oldest (6) goes with the other 6 (2 x 6 = 12 tokens padded); then the
    # oldest left ("b") with the other short ones and, as long as it fits,
    # the nearest longer one: 4 x 1, then "ffff" would pad to 5 x 4 = 20.
    assert model.batches == [["aaaaaa", "cccccc"], ["b", "d", "e", "g"], ["ffff"]]
    # In arrival order (batch_size_fn alone) the same inputs pad far more.
    assert sum(padded(b) for b in model.batches) == 12 + 4 + 4


async def test_the_oldest_call_is_never_passed_over() -> None:
    model = Budget()
    # A long input first, then more short ones than one batch holds: the
    # long one still goes in the first batch, though the short ones pad less.
    texts = ["x" * 10, *["s"] * 20]
    await behind_a_batch(model, texts)
    assert model.batches[0][0] == "x" * 10
    assert all(padded(b) <= 12 for b in model.batches)
    assert sorted(t for b in model.batches for t in b) == sorted(texts)


async def test_without_sort_key_batches_keep_arrival_order() -> None:
    class Arrival(Budget):
        @batch(max_batch_size=12, batch_wait_timeout_s=0.05, batch_size_fn=padded)
        async def run(self, texts: list[str]) -> list[int]:
            return await Budget.run.__wrapped__(self, texts)

    model = Arrival()
    await behind_a_batch(model, ["aaaaaa", "b", "cccccc", "d"])
    assert model.batches == [["aaaaaa", "b"], ["cccccc", "d"]]


async def test_an_input_over_the_budget_alone_fails_and_the_rest_go_on() -> None:
    model = Budget()
    results = await queued(model.run("x" * 13), model.run("ok"))
    assert isinstance(results[0], RuntimeError)
    assert "sizes this input at 13, more than max_batch_size (12)" in str(results[0])
    assert results[1] == 2 and model.batches == [["ok"]]


async def test_a_broken_sort_key_fails_the_waiting_calls_with_its_error() -> None:
    @batch(batch_size_fn=padded, sort_key=lambda text: text.missing)
    async def echo(xs: list[str]) -> list[str]:
        return xs

    results = await queued(echo("a"), echo("b"))
    assert all(isinstance(r, AttributeError) for r in results)


def test_a_sort_key_that_is_not_a_function_is_refused() -> None:
    with pytest.raises(TypeError, match="sort_key must be a function"):
        batch(sort_key=3)  # type: ignore[arg-type]


async def test_each_instance_keeps_its_sort_key() -> None:
    one, two = Budget(), Budget()
    await queued(one.run("aa"), two.run("b"), one.run("c"))
    assert one.batches == [["aa", "c"]] and two.batches == [["b"]]
