"""Word-level tokenisation for the small engines: text to token ids and back.

A token is a word (letters and digits, with inner apostrophes or hyphens, as
in "father's" or "loving-kindness", and a trailing possessive apostrophe, as
in "Moses'") or one punctuation mark. Whitespace only separates tokens, so
`split` and `count_tokens` see the same tokens whatever the spacing.

The vocabulary gives each distinct training token an id; two ids are reserved:
`END_OF_TEXT` (0), which the training text carries at the end of every
passage and which ends generation, and `UNKNOWN` (1), which a prompt word
outside the vocabulary maps to (the model then backs off past it).

Text is reassembled with English spacing: a space before a word, none before
closing punctuation (`, . : ; ? ! ) '`) and none after an opening parenthesis.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

END_OF_TEXT = 0
UNKNOWN = 1
END_OF_TEXT_TEXT = "<|endoftext|>"
UNKNOWN_TEXT = "<|unknown|>"

_TOKEN = re.compile(r"\w+(?:['\u2019\-]\w+)*(?:(?<=s)')?|[^\w\s]")
_NO_SPACE_BEFORE = frozenset(",.:;?!)'\u2019")
_NO_SPACE_AFTER = frozenset("(")


def split(text: str) -> list[str]:
    """The tokens of `text`, as strings; any string is valid input."""
    return _TOKEN.findall(text)


def joins_without_space(previous: str | None, token: str) -> bool:
    """Whether `token` follows `previous` directly (None: at the start of text)."""
    return previous is None or token in _NO_SPACE_BEFORE or previous in _NO_SPACE_AFTER


class Vocabulary:
    """Token strings and their ids, built once from training text."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {END_OF_TEXT_TEXT: END_OF_TEXT, UNKNOWN_TEXT: UNKNOWN}
        self._texts: list[str] = [END_OF_TEXT_TEXT, UNKNOWN_TEXT]

    def __len__(self) -> int:
        return len(self._texts)

    def add_passages(self, passages: Iterable[str]) -> list[int]:
        """Adds the tokens of every passage; returns the whole training sequence
        as ids, END_OF_TEXT after each passage."""
        ids = self._ids
        texts = self._texts
        sequence: list[int] = []
        for passage in passages:
            for token in _TOKEN.findall(passage):
                token_id = ids.get(token)
                if token_id is None:
                    token_id = ids[token] = len(texts)
                    texts.append(token)
                sequence.append(token_id)
            sequence.append(END_OF_TEXT)
        return sequence

    def encode(self, text: str) -> list[int]:
        """The ids of `text`'s tokens. A word outside the vocabulary tries its
        lower-case and capitalised forms ("god" finds "God"), then is UNKNOWN."""
        ids = self._ids
        encoded = []
        for token in _TOKEN.findall(text):
            token_id = ids.get(token)
            if token_id is None:
                token_id = ids.get(token.lower(), ids.get(token.capitalize(), UNKNOWN))
            encoded.append(token_id)
        return encoded

    def text(self, token_id: int) -> str:
        """The token's string; END_OF_TEXT's is "" (it ends text, it adds none).
        Raises IndexError for an id outside the vocabulary."""
        return "" if token_id == END_OF_TEXT else self._texts[token_id]

    def decode(self, token_ids: Sequence[int]) -> str:
        """The text of a token sequence, with English spacing (module docstring)."""
        out: list[str] = []
        previous: str | None = None
        for token_id in token_ids:
            token = self.text(token_id)
            if not token:
                continue
            out.append(token if joins_without_space(previous, token) else " " + token)
            previous = token
        return "".join(out)
