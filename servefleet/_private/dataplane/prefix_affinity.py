"""PrefixAffinity: requests whose routing keys share a prefix go to one replica.

Language models keep the work done on a prompt's beginning (vLLM's prefix
cache): the next turn of a conversation, whose prompt is the conversation
so far, costs less on the replica that served the last turn. This router
remembers, for blocks of `block_chars` characters of the keys it routed,
which replica took them (each block's hash chained to the one before, so a
block stands for the whole prefix up to it), at most `max_blocks`, least
recently used out. A request goes to the replica holding its key's longest
remembered prefix, unless that replica has more than `imbalance_threshold`
requests in flight beyond the least loaded candidate: then to the least
loaded, which from then on holds the prefix. A key with no remembered
prefix, or no key, goes by power of two choices and is remembered there.
A request for a multiplexed model is routed so among the replicas holding
the model; when none holds it, to where the default would load it
(routers.place_model), remembered there.

Each proxy and each handle router keeps its own index: affinity holds for
the requests one process routes (one proxy, or one ingress replica's
handles), which is how conversations usually arrive.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from .routers import PowerOfTwoChoices, ReplicaInfo, RequestInfo, RequestRouter, place_model


class PrefixAffinity(RequestRouter):
    def __init__(self, imbalance_threshold: int = 2, block_chars: int = 64,
                 max_blocks: int = 65536) -> None:
        for name, value, low in (("imbalance_threshold", imbalance_threshold, 0),
                                 ("block_chars", block_chars, 1), ("max_blocks", max_blocks, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer of at least {low}, got {value!r}")
        self.imbalance_threshold = imbalance_threshold
        self.block_chars = block_chars
        self.max_blocks = max_blocks
        self._owners: OrderedDict[bytes, str] = OrderedDict()
        self._fallback = PowerOfTwoChoices()

    def _blocks(self, key: str) -> list[bytes]:
        """Chained hashes of the key's blocks (a last partial block included)."""
        digest, out = b"", []
        for start in range(0, len(key), self.block_chars):
            digest = hashlib.blake2b(digest + key[start:start + self.block_chars].encode(),
                                     digest_size=12).digest()
            out.append(digest)
        return out

    def choose(self, replicas: Sequence[ReplicaInfo],
               request: RequestInfo) -> ReplicaInfo | None:
        if request.model_id:
            holders = [r for r in replicas if request.model_id in r.models]
            if not holders:
                chosen = place_model(replicas, request.model_id)
                if request.routing_key:
                    self._remember(self._blocks(request.routing_key), chosen.replica_id)
                return chosen
            replicas = holders
        if not request.routing_key:
            return self._fallback.choose(replicas, request)
        blocks = self._blocks(request.routing_key)
        by_id = {r.replica_id: r for r in replicas}
        owner = None
        for block in reversed(blocks):  # the longest remembered prefix first
            replica_id = self._owners.get(block)
            if replica_id is not None:
                owner = by_id.get(replica_id)
                if owner is not None:
                    break
        least = min(replicas, key=lambda r: r.in_flight)
        if owner is None:
            chosen = self._fallback.choose(replicas, request) or least
        elif owner.in_flight - least.in_flight > self.imbalance_threshold:
            chosen = least
        else:
            chosen = owner
        self._remember(blocks, chosen.replica_id)
        return chosen

    def _remember(self, blocks: list[bytes], replica_id: str) -> None:
        for block in blocks:
            self._owners[block] = replica_id
            self._owners.move_to_end(block)
        while len(self._owners) > self.max_blocks:
            self._owners.popitem(last=False)

    def replicas_changed(self, replica_ids: Iterable[str]) -> None:
        alive = set(replica_ids)
        for block in [b for b, owner in self._owners.items() if owner not in alive]:
            del self._owners[block]
