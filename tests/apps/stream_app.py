"""Streaming through handles (tests/test_stream_handles.py): Front streams the
yields of Tokens' generator to its HTTP client; a generator that is
cancelled leaves a file in `marks`."""

from __future__ import annotations

import asyncio
import os
import uuid

from servefleet import deployment


@deployment
class Tokens:
    def __init__(self, marks: str = "") -> None:
        self.marks = marks

    async def tokens(self, n: int, pause: float = 0.05):
        try:
            for i in range(n):
                yield f"t{i}"
                await asyncio.sleep(pause)
        except (asyncio.CancelledError, GeneratorExit):
            if self.marks:
                with open(os.path.join(self.marks, f"cancelled-{uuid.uuid4().hex}"), "w"):
                    pass
            raise

    def numbers(self, n: int):
        yield from range(n)

    async def plain(self) -> int:
        return 1


@deployment
class Front:
    def __init__(self, tokens) -> None:
        self.tokens = tokens

    async def __call__(self, request):
        n = int(request.query_params.get("n", "5"))

        async def lines():
            async for token in self.tokens.options(stream=True).tokens.remote(n):
                yield token + "\n"

        return lines()

    def collect(self, n: int) -> list[int]:
        """Sync code in a replica's thread iterating a stream."""
        return list(self.tokens.options(stream=True).numbers.remote(n))


def build(args: dict):
    return Front.bind(Tokens.bind(marks=args.get("marks", "")))
