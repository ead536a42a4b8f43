"""NGramEngine with a prefix cache, for bench/llm_affinity.py.

Engines such as vLLM keep the work done on a prompt's prefix (its attention
keys and values) in blocks and reuse them when a later prompt starts the same
way: the next turn of a conversation, sent to the replica that served the
last one, skips most of its prefill. This engine keeps such an index (hashes
of the prompt's 64-character blocks, each chained to the one before, at most
`cache_blocks`, least recently used out) and counts, with servefleet.metrics,
the turns that hit: whose prompt found at least half its blocks cached (the
conversation so far, up to the previous turn, is more than half of a turn's
prompt here; a first block alone, such as a shared system prompt, is not).
The n-gram model needs no such cache; the counts say where routing sent the
turns, which is what the benchmark compares.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import AsyncIterator

from servefleet import metrics
from servefleet.llm import NGramEngine, Piece, SamplingParams

BLOCK = 64
TURNS = metrics.Counter("llm_prefix_cache_turns", "prompts looked up in the prefix cache")
HITS = metrics.Counter("llm_prefix_cache_hit_turns",
                       "prompts with at least half their blocks cached")


class PrefixCachingEngine(NGramEngine):
    def __init__(self, cache_blocks: int = 4096, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.cache_blocks = cache_blocks
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def _look_up(self, prompt: str) -> bool:
        """Whether half the prompt's blocks or more were cached at its start;
        then all its blocks are."""
        digest, cached, hitting, total = b"", 0, True, len(prompt) // BLOCK
        for start in range(0, len(prompt) - len(prompt) % BLOCK, BLOCK):
            digest = hashlib.blake2b(digest + prompt[start:start + BLOCK].encode(),
                                     digest_size=16).digest()
            if hitting and digest in self._blocks:
                cached += 1
                self._blocks.move_to_end(digest)
            else:
                hitting = False
                self._blocks[digest] = None
                if len(self._blocks) > self.cache_blocks:
                    self._blocks.popitem(last=False)
        return total >= 2 and cached >= total / 2

    async def generate(self, prompt: str, params: SamplingParams) -> AsyncIterator[Piece]:
        TURNS.inc()
        if self._look_up(prompt):
            HITS.inc()
        async for piece in super().generate(prompt, params):
            yield piece
