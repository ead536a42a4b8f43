"""NGramEngine: a small word-level language model that really generates.

It makes the whole servefleet.llm path real with no download and no GPU: a
trigram model (by default) of the King James Bible, trained in `start()` from
the text Debian ships (`kjv.py`), sampling one word or punctuation token at a
time (`tokens.py`) from a distribution it computes over its whole vocabulary
at every step (`ngram_model.py`, `sampling.py`).

1. `start()` reads the verses with `bible -f PASSAGES` and trains: the
   tokens of every verse followed by the end-of-text token, counted up to
   `order`. The whole text (944,480 tokens, a vocabulary of 13,815) trains
   in 0.45 s on a 2-core machine at order 3, bible included (0.37 s at order
   2, 0.52 s at 4); Genesis alone in 0.03 s. It runs in a worker thread, so
   the event loop stays live meanwhile.
2. `generate(prompt, params)` seeds the context with the end-of-text token
   (the start of a passage) followed by the prompt's tokens; unknown prompt
   words back off to shorter contexts. Each step computes the interpolated
   distribution over the vocabulary, applies temperature and top_p and draws
   with the request's own generator (`numpy.random.default_rng(seed)`): a
   real, CPU-bound cost per token, like a real model's. Measured on the whole
   text: 40 us a token greedy, 90 us sampled, 260 us with top_p < 1 (the
   nucleus search partitions the vocabulary).
3. It ends at max_tokens ("length"), at a stop string (`stops.py`; "stop",
   the stop text not emitted) or when the model draws end of text ("stop",
   a piece with empty text). Between tokens it awaits `asyncio.sleep(0)`, so
   a cancelled request stops within one token.

`tokens_generated` counts every token drawn by this engine, across requests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import numpy as np

from servefleet._private.llm import tokens
from servefleet._private.llm.engine import (
    FINISH_LENGTH,
    FINISH_STOP,
    ChatMessage,
    Piece,
    SamplingParams,
)
from servefleet._private.llm.kjv import WHOLE_TEXT, read_verses
from servefleet._private.llm.ngram_model import MAX_ORDER, NGramModel
from servefleet._private.llm.sampling import choose_token
from servefleet._private.llm.stops import StopMatcher


class NGramEngine:
    """An n-gram model of the King James Bible behind the Engine interface.

    Every constructor argument is JSON-able (it comes from deployment config):

    - `model_id`: the name it is served under (default "kjv-trigram");
    - `passages`: the `bible` range it trains on (default the whole text,
      "Gen1:1-Rev22:21"; "Gen1:1-Gen50:26" is Genesis, quick for tests);
    - `order`: n, the tokens a prediction looks at plus one (1 to 4; default 3);
    - `bible_command`: the command that prints the text (default "bible").

    Raises ValueError for an order outside 1..4 or an empty `passages`.
    """

    def __init__(
        self,
        model_id: str = "kjv-trigram",
        passages: str = WHOLE_TEXT,
        order: int = 3,
        bible_command: str = "bible",
    ) -> None:
        if not isinstance(order, int) or not 1 <= order <= MAX_ORDER:
            raise ValueError(f"order must be an integer from 1 to {MAX_ORDER}, not {order!r}")
        if not passages.strip():
            raise ValueError("passages must be a bible range such as 'Gen1:1-Rev22:21'")
        self.model_id = model_id
        self.passages = passages
        self.order = order
        self.bible_command = bible_command
        self.tokens_generated = 0
        self._vocabulary: tokens.Vocabulary | None = None
        self._model: NGramModel | None = None

    def load(self) -> None:
        """Reads the text and trains, once (later calls return at once); LLMServer
        calls it in its constructor, before the replica reports ready. Raises
        kjv.TrainingTextError when `bible` is not installed (apt-get install
        bible-kjv) or the range gives no verse."""
        if self._model is None:
            vocabulary, model = self._train()
            self._vocabulary, self._model = vocabulary, model

    async def start(self) -> None:
        """`load()` in a worker thread, when it has not run yet."""
        if self._model is None:
            await asyncio.to_thread(self.load)

    def _train(self) -> tuple[tokens.Vocabulary, NGramModel]:
        verses = read_verses(self.passages, self.bible_command)
        vocabulary = tokens.Vocabulary()
        sequence = vocabulary.add_passages(verses)
        return vocabulary, NGramModel(sequence, len(vocabulary), self.order)

    @property
    def vocabulary(self) -> tokens.Vocabulary:
        """The trained vocabulary; RuntimeError before `start()`."""
        return self._trained()[0]

    def _trained(self) -> tuple[tokens.Vocabulary, NGramModel]:
        if self._vocabulary is None or self._model is None:
            raise RuntimeError("NGramEngine.start() has not finished: the model is not trained")
        return self._vocabulary, self._model

    def chat_prompt(self, messages: Sequence[ChatMessage]) -> str:
        """The chat template: one line per message, its role capitalised, then
        the assistant's cue, which the model continues:

            System: You are terse.
            User: Who made the heaven?
            Assistant:

        Any role is accepted ("tool" becomes "Tool: ..."); no messages give
        just "Assistant:"."""
        lines = [f"{m.role.capitalize()}: {m.content}" for m in messages]
        lines.append("Assistant:")
        return "\n".join(lines)

    def count_tokens(self, text: str) -> int:
        """The number of tokens the model sees in `text` (works before start())."""
        return len(tokens.split(text))

    async def generate(self, prompt: str, params: SamplingParams) -> AsyncIterator[Piece]:
        """Pieces continuing `prompt`, one per token (module docstring, steps 2
        and 3). Raises RuntimeError before `start()`, ValueError for
        max_tokens < 1, a negative temperature or a top_p outside (0, 1]."""
        vocabulary, model = self._trained()
        if params.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, not {params.max_tokens}")
        rng = np.random.default_rng(params.seed)
        prompt_tokens = tokens.split(prompt)
        context = [tokens.END_OF_TEXT] * (self.order - 1) + vocabulary.encode(prompt)
        del context[: len(context) - (self.order - 1)]
        # The first token is spaced after the prompt's last one, unless the
        # prompt ends in whitespace (or is empty).
        previous = prompt_tokens[-1] if prompt_tokens and not prompt[-1].isspace() else None
        stops = StopMatcher(params.stop)
        for produced in range(1, params.max_tokens + 1):
            await asyncio.sleep(0)  # a turn for the loop: cancellation lands here
            probs = model.distribution(context)
            if params.ignore_eos:
                probs = probs.copy()
                probs[tokens.END_OF_TEXT] = 0.0
            token_id = choose_token(probs, params.temperature, params.top_p, rng)
            self.tokens_generated += 1
            if token_id == tokens.END_OF_TEXT:
                yield Piece(stops.flush(), token_id, FINISH_STOP)
                return
            token = vocabulary.text(token_id)
            text = stops.feed(token if tokens.joins_without_space(previous, token) else " " + token)
            if stops.stopped:
                yield Piece(text, token_id, FINISH_STOP)
                return
            if produced == params.max_tokens:
                yield Piece(text + stops.flush(), token_id, FINISH_LENGTH)
                return
            yield Piece(text, token_id)
            previous = token
            if self.order > 1:
                context.append(token_id)
                del context[0]
