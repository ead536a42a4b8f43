"""OpenAI's response bodies and stream chunks, built from what LLMServer yields.

A `Reply` is one request's answer in the making: its id, creation time,
model and kind (chat or completion). It writes the whole answer
(`complete`), or, streamed, the chunks as server-sent event lines
(`role_chunk`, `piece_chunk`, `usage_chunk`, `DONE`). Each generated token is
one chunk, so a streamed answer's token chunks count exactly its
`usage.completion_tokens`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

DONE = b"data: [DONE]\n\n"


def event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


@dataclass
class Choice:
    """One choice's text so far, its tokens and why it ended."""

    text: str = ""
    tokens: int = 0
    finish_reason: str | None = None


@dataclass
class Reply:
    model: str
    chat: bool
    include_usage: bool = False
    id: str = field(default="")
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        if not self.id:
            self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex

    def _head(self, streamed: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if streamed else "chat.completion") if self.chat \
            else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def complete(self, choices: list[Choice], prompt_tokens: int) -> dict[str, Any]:
        """The whole answer of a request that was not streamed."""
        made = []
        for index, c in enumerate(choices):
            answer: dict[str, Any] = {"index": index, "logprobs": None,
                                      "finish_reason": c.finish_reason}
            if self.chat:
                answer["message"] = {"role": "assistant", "content": c.text}
            else:
                answer["text"] = c.text
            made.append(answer)
        return {**self._head(False), "choices": made, "system_fingerprint": None,
                "usage": usage(prompt_tokens, sum(c.tokens for c in choices))}

    def _chunk(self, choices: list[dict[str, Any]]) -> bytes:
        body = {**self._head(True), "choices": choices}
        if self.include_usage:
            body["usage"] = None
        return event(body)

    def role_chunk(self, index: int) -> bytes:
        """Chat only: the first chunk of a choice names the speaker."""
        return self._chunk([{"index": index, "delta": {"role": "assistant", "content": ""},
                             "logprobs": None, "finish_reason": None}])

    def piece_chunk(self, index: int, text: str, finish_reason: str | None) -> bytes:
        if self.chat:
            delta = {"content": text} if text or finish_reason is None else {}
            return self._chunk([{"index": index, "delta": delta, "logprobs": None,
                                 "finish_reason": finish_reason}])
        return self._chunk([{"index": index, "text": text, "logprobs": None,
                             "finish_reason": finish_reason}])

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """stream_options.include_usage: the last chunk, no choices, the usage."""
        return event({**self._head(True), "choices": [],
                      "usage": usage(prompt_tokens, completion_tokens)})
