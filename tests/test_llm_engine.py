"""NGramEngine (servefleet._private.llm.ngram) against the real model, trained
on Genesis with Debian's `bible` command; and its stop matcher, sampler and
tokeniser on their own. No servers."""

from __future__ import annotations

import asyncio
import string
from collections.abc import Iterator

import numpy as np
import pytest

from servefleet._private.llm import tokens
from servefleet._private.llm.engine import (
    FINISH_LENGTH,
    FINISH_STOP,
    ChatMessage,
    Engine,
    Piece,
    SamplingParams,
)
from servefleet._private.llm.kjv import TrainingTextError
from servefleet._private.llm.ngram import NGramEngine
from servefleet._private.llm.sampling import choose_token, nucleus
from servefleet._private.llm.stops import StopMatcher

GENESIS = "Gen1:1-Gen50:26"


@pytest.fixture(scope="module")
def engine() -> Iterator[NGramEngine]:
    trained = NGramEngine(passages=GENESIS)
    asyncio.run(trained.start())  # about 0.04 s
    yield trained


async def run(engine: NGramEngine, prompt: str = "And", /, **params: object) -> list[Piece]:
    return [piece async for piece in engine.generate(prompt, SamplingParams(**params))]  # type: ignore[arg-type]


def text_of(pieces: list[Piece]) -> str:
    return "".join(piece.text for piece in pieces)


async def test_the_same_seed_gives_the_same_pieces(engine: NGramEngine) -> None:
    first = await run(engine, "And God said", max_tokens=40, seed=7)
    assert first == await run(engine, "And God said", max_tokens=40, seed=7)
    assert len(first) > 3


async def test_different_seeds_give_different_text(engine: NGramEngine) -> None:
    texts = {text_of(await run(engine, max_tokens=20, seed=seed)) for seed in range(6)}
    assert len(texts) > 1


async def test_no_seed_is_fresh_randomness_per_request(engine: NGramEngine) -> None:
    texts = {text_of(await run(engine, max_tokens=20, temperature=1.5)) for _ in range(6)}
    assert len(texts) > 1


async def test_temperature_zero_is_deterministic_without_a_seed(engine: NGramEngine) -> None:
    greedy = await run(engine, "In the beginning", max_tokens=25, temperature=0)
    assert greedy == await run(engine, "In the beginning", max_tokens=25, temperature=0)
    assert text_of(greedy).startswith(" of ")


async def test_a_tiny_top_p_keeps_only_the_most_likely_token(engine: NGramEngine) -> None:
    greedy = await run(engine, "And Jacob", max_tokens=25, temperature=0)
    for seed in range(5):
        assert await run(engine, "And Jacob", max_tokens=25, top_p=1e-9, seed=seed) == greedy


async def test_max_tokens_gives_that_many_pieces_and_length(engine: NGramEngine) -> None:
    pieces = await run(engine, "And Jacob said", max_tokens=17, temperature=0)
    assert len(pieces) == 17
    assert [piece.finish_reason for piece in pieces] == [None] * 16 + [FINISH_LENGTH]
    assert engine.vocabulary.decode([piece.token_id for piece in pieces]) == text_of(pieces)[1:]


@pytest.mark.parametrize("stop", ["LORD", " God of my", "d of m"])
async def test_a_stop_sequence_ends_generation_before_it(engine: NGramEngine, stop: str) -> None:
    whole = text_of(await run(engine, "And Jacob said", max_tokens=30, temperature=0))
    assert stop in whole  # ' unto him, and the LORD God of my lord, ...'
    pieces = await run(engine, "And Jacob said", max_tokens=30, temperature=0, stop=(stop, "zzz"))
    assert pieces[-1].finish_reason == FINISH_STOP
    assert text_of(pieces) == whole[: whole.index(stop)]
    assert all(piece.finish_reason is None for piece in pieces[:-1])


async def test_held_back_text_is_released_at_the_length_limit(engine: NGramEngine) -> None:
    whole = text_of(await run(engine, "And Jacob said", max_tokens=12, temperature=0))
    partial = whole.split()[-1] + " never"  # a stop whose start the last token is
    pieces = await run(engine, "And Jacob said", max_tokens=12, temperature=0, stop=(partial,))
    assert pieces[-1].finish_reason == FINISH_LENGTH
    assert text_of(pieces) == whole


async def test_the_end_of_text_token_ends_generation_with_stop(engine: NGramEngine) -> None:
    pieces = await run(engine, "And", max_tokens=300, seed=0)
    assert len(pieces) < 300
    assert pieces[-1] == Piece("", tokens.END_OF_TEXT, FINISH_STOP)


async def test_unknown_prompt_words_back_off(engine: NGramEngine) -> None:
    assert engine.vocabulary.encode("Zyzzyva quux") == [tokens.UNKNOWN, tokens.UNKNOWN]
    pieces = await run(engine, "Zyzzyva quux", max_tokens=10, seed=3)
    assert pieces
    assert all(piece.token_id != tokens.UNKNOWN for piece in pieces)


async def test_cancelling_the_consumer_stops_generation_within_a_token(
    engine: NGramEngine,
) -> None:
    three = asyncio.Event()
    received: list[Piece] = []

    async def consume() -> None:
        params = SamplingParams(max_tokens=100_000, temperature=0)
        async for piece in engine.generate("And Jacob", params):
            received.append(piece)
            if len(received) == 3:
                three.set()

    before = engine.tokens_generated
    task = asyncio.create_task(consume())
    await three.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stopped_at = engine.tokens_generated - before
    assert 3 <= stopped_at <= 4
    for _ in range(20):
        await asyncio.sleep(0)
    assert engine.tokens_generated - before == stopped_at


async def test_bad_parameters_and_an_untrained_engine_raise() -> None:
    untrained = NGramEngine(passages=GENESIS)
    with pytest.raises(RuntimeError, match="start"):
        await run(untrained, max_tokens=5)
    with pytest.raises(ValueError, match="order"):
        NGramEngine(order=9)


@pytest.mark.parametrize(
    ("params", "message"),
    [({"max_tokens": 0}, "max_tokens"), ({"temperature": -1.0}, "temperature"),
     ({"top_p": 0.0}, "top_p")],
)
async def test_bad_sampling_parameters_raise(
    engine: NGramEngine, params: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        await run(engine, **params)


def test_count_tokens_is_the_tokeniser(engine: NGramEngine) -> None:
    text = "In the beginning, God's  word\n(and Moses' rod)."
    assert tokens.split(text) == [
        "In", "the", "beginning", ",", "God's", "word", "(", "and", "Moses'", "rod", ")", ".",
    ]
    assert engine.count_tokens(text) == 12 == len(engine.vocabulary.encode(text))
    assert NGramEngine().count_tokens("") == 0  # no training needed
    ids = engine.vocabulary.encode("and god said")  # lower case finds "God"
    assert engine.vocabulary.decode(ids) == "and God said"
    assert tokens.UNKNOWN not in ids


def test_it_is_an_engine_and_renders_chat(engine: NGramEngine) -> None:
    assert isinstance(engine, Engine)
    prompt = engine.chat_prompt(
        [ChatMessage("system", "Be brief."), ChatMessage("user", "Who made light?")]
    )
    assert prompt == "System: Be brief.\nUser: Who made light?\nAssistant:"
    assert engine.chat_prompt([]) == "Assistant:"


async def test_a_missing_bible_command_says_what_to_install() -> None:
    engine = NGramEngine(passages=GENESIS, bible_command="servefleet-no-such-bible")
    with pytest.raises(TrainingTextError, match="apt-get install bible-kjv"):
        await engine.start()


async def test_a_bad_passage_range_is_an_error() -> None:
    with pytest.raises(TrainingTextError, match="Bad Book"):
        await NGramEngine(passages="Nope1:1-Nope2:2").start()


def test_the_stop_matcher_holds_back_a_possible_stop() -> None:
    matcher = StopMatcher(["Amen", "", "men."])
    assert matcher.feed("So be it. A") == "So be it. "
    assert matcher.feed("m") == ""
    assert matcher.feed("ple") == "Ample"
    assert matcher.feed(" Am") == " "
    assert matcher.feed("en and") == ""
    assert matcher.stopped
    assert matcher.feed("more") == ""
    assert matcher.flush() == ""


def test_the_stop_matcher_cuts_at_the_earliest_stop() -> None:
    matcher = StopMatcher(["women", "men"])
    assert matcher.feed("the wo") == "the "
    assert matcher.feed("men") == ""  # "women" starts before "men"
    assert matcher.stopped
    unstopped = StopMatcher(["xyz"])
    assert unstopped.feed("ab x") == "ab "
    assert unstopped.flush() == "x"


def test_nucleus_is_the_smallest_heaviest_set() -> None:
    weights = np.array([0.1, 0.4, 0.3, 0.1, 0.1])
    assert nucleus(weights, 0.5).tolist() == [1, 2]
    assert nucleus(weights, 0.4).tolist() == [1]
    assert nucleus(weights, 1.0).tolist() == [1, 2, 0, 3, 4]  # equals by id
    ties = np.array([0.25, 0.25, 0.25, 0.25])
    assert nucleus(ties, 0.3).tolist() == [0, 1]


def test_choose_token_follows_temperature_and_top_p() -> None:
    probs = np.array([0.05, 0.6, 0.3, 0.05])
    rng = np.random.default_rng(1)
    assert {choose_token(probs, 0.0, 1.0, rng) for _ in range(20)} == {1}
    assert {choose_token(probs, 1.0, 0.5, rng) for _ in range(50)} == {1}
    assert {choose_token(probs, 1.0, 0.85, rng) for _ in range(200)} == {1, 2}
    assert {choose_token(probs, 1.0, 1.0, rng) for _ in range(500)} == {0, 1, 2, 3}
    cold = [choose_token(probs, 0.05, 1.0, rng) for _ in range(200)]
    assert cold.count(1) > 195
    assert probs.tolist() == [0.05, 0.6, 0.3, 0.05]  # not modified


def test_the_tokeniser_splits_any_text() -> None:
    assert tokens.split(string.punctuation) == list(string.punctuation)
    assert tokens.split("  ") == []
    assert tokens.split("loving-kindness, x2") == ["loving-kindness", ",", "x2"]
