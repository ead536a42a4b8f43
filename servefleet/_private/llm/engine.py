"""The engine interface: what servefleet.llm needs from a language model.

An engine turns a prompt into token pieces. It is small on purpose, so that
wrapping vLLM's AsyncLLMEngine or llama.cpp is a page of code (docs/llm.md
maps vLLM's API onto it):

- `start()` loads (or trains) the model, once per replica, before requests;
  an engine may also have a synchronous `load()` doing the heavy part
  (reading weights, training): LLMServer calls it in its constructor, so the
  replica reports ready only once the model is there, then awaits `start()`
  on the serving loop before the first request (for what must be made on
  that loop: an engine's background tasks). Without `load()`, `start()` runs
  on the first request, after the replica reported ready;
- `chat_prompt(messages)` renders OpenAI chat messages with the model's chat
  template into the prompt text `generate` takes;
- `count_tokens(text)` is the number of tokens the model sees in `text`
  (`usage.prompt_tokens`);
- `generate(prompt, params)` is an async generator of `Piece`s, one per
  generated token, the last carrying `finish_reason`. It must give the event
  loop a turn between tokens (an `await`), so that a cancelled request stops
  it within one token, and it stops at `params.max_tokens`, at a stop
  sequence (the stop text itself is not emitted, as OpenAI does) or at the
  model's end of text.

The same seed, prompt and parameters give the same pieces.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

FINISH_STOP = "stop"      # a stop sequence, or the model's end of text
FINISH_LENGTH = "length"  # max_tokens, or the model's context


@dataclass(frozen=True)
class SamplingParams:
    """How to sample, as the OpenAI request says (validated before it gets here)."""

    max_tokens: int = 16
    temperature: float = 1.0  # 0: always the most likely token
    top_p: float = 1.0        # nucleus sampling: the smallest set holding this mass
    seed: int | None = None   # None: a fresh random state per request
    stop: tuple[str, ...] = ()
    # Never end at the model's end of text (vLLM's extension of the same
    # name): generation runs to max_tokens or a stop sequence.
    ignore_eos: bool = False


@dataclass(frozen=True)
class Piece:
    """One generated token: the text it adds ("" when a stop sequence swallowed
    it), its id in the model's vocabulary, and on the last piece why generation
    ended (FINISH_STOP or FINISH_LENGTH)."""

    text: str
    token_id: int
    finish_reason: str | None = None


@dataclass(frozen=True)
class ChatMessage:
    role: str  # "system", "user", "assistant" (others as the template allows)
    content: str


@runtime_checkable
class Engine(Protocol):
    """A language model servefleet.llm can serve (see the module docstring)."""

    async def start(self) -> None: ...

    def chat_prompt(self, messages: Sequence[ChatMessage]) -> str: ...

    def count_tokens(self, text: str) -> int: ...

    def generate(self, prompt: str, params: SamplingParams) -> AsyncIterator[Piece]: ...
