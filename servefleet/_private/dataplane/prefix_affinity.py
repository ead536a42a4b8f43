"""PrefixAffinity: requests whose routing keys share a prefix go to one replica.

Language models keep the work done on a prompt's beginning (vLLM's prefix
cache): the next turn of a conversation, whose prompt is the conversation
so far, costs less on the replica that served the last turn. This router
remembers which replica took each key it routed, as blocks of `block_chars`
characters (each block's hash chained to the one before, so a block stands
for the whole prefix up to it) plus the key's last, partial block (so that
a key shorter than a block, a first turn, is found as the prefix of the
next), at most `max_blocks` entries, least recently used out. A request goes
to the replica holding its key's longest remembered prefix, unless that
replica has more than `imbalance_threshold` requests in flight beyond the
least loaded candidate: then to the least loaded, which from then on holds
the prefix. A key with no remembered prefix, or no key, goes by power of two
choices and is remembered there. A request for a multiplexed model is
routed so among the replicas holding the model; when none holds it, to
where the default would load it (routers.place_model), remembered there.

Each proxy and each handle router keeps its own index: affinity holds for
the requests one process routes (one proxy, or one ingress replica's
handles), which is how conversations usually arrive.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from .routers import PowerOfTwoChoices, ReplicaInfo, RequestInfo, RequestRouter, place_model


def _chain(parent: bytes, text: str) -> bytes:
    return hashlib.blake2b(parent + text.encode(), digest_size=12).digest()


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
        # Prefix hash -> replica id, least recently used first.
        self._owners: OrderedDict[bytes, str] = OrderedDict()
        # Hash of a prefix ending at a block boundary -> the lengths of the
        # partial blocks remembered after it (bounded with _owners; a length
        # whose entry was evicted only costs a lookup that misses).
        self._tails: OrderedDict[bytes, set[int]] = OrderedDict()
        self._fallback = PowerOfTwoChoices()

    def _boundaries(self, key: str) -> list[bytes]:
        """The chained hashes at the key's block boundaries: [b"" (empty), block 1, ...]."""
        out = [b""]
        for start in range(0, len(key) - len(key) % self.block_chars, self.block_chars):
            out.append(_chain(out[-1], key[start:start + self.block_chars]))
        return out

    def _owner(self, key: str, boundaries: list[bytes],
               by_id: dict[str, ReplicaInfo]) -> ReplicaInfo | None:
        """The candidate holding the key's longest remembered prefix, if any."""
        for depth in range(len(boundaries) - 1, -1, -1):
            parent, start = boundaries[depth], depth * self.block_chars
            rest = len(key) - start
            # Longest first: partial blocks after this boundary, then the boundary.
            for length in sorted(self._tails.get(parent, ()), reverse=True):
                if length <= rest:
                    found = by_id.get(self._owners.get(
                        _chain(parent, key[start:start + length]), ""))
                    if found is not None:
                        return found
            if depth:
                found = by_id.get(self._owners.get(parent, ""))
                if found is not None:
                    return found
        return None

    def choose(self, replicas: Sequence[ReplicaInfo],
               request: RequestInfo) -> ReplicaInfo | None:
        key = request.routing_key
        if request.model_id:
            holders = [r for r in replicas if request.model_id in r.models]
            if not holders:
                chosen = place_model(replicas, request.model_id)
                if key:
                    self._remember(key, self._boundaries(key), chosen.replica_id)
                return chosen
            replicas = holders
        if not key:
            return self._fallback.choose(replicas, request)
        boundaries = self._boundaries(key)
        owner = self._owner(key, boundaries, {r.replica_id: r for r in replicas})
        least = min(replicas, key=lambda r: r.in_flight)
        if owner is None:
            chosen = self._fallback.choose(replicas, request) or least
        elif owner.in_flight - least.in_flight > self.imbalance_threshold:
            chosen = least
        else:
            chosen = owner
        self._remember(key, boundaries, chosen.replica_id)
        return chosen

    def _remember(self, key: str, boundaries: list[bytes], replica_id: str) -> None:
        entries = boundaries[1:]
        tail = len(key) % self.block_chars
        if tail:
            parent = boundaries[-1]
            entries.append(_chain(parent, key[len(key) - tail:]))
            self._tails.setdefault(parent, set()).add(tail)
            self._tails.move_to_end(parent)
        for entry in entries:
            self._owners[entry] = replica_id
            self._owners.move_to_end(entry)
        while len(self._owners) > self.max_blocks:
            self._owners.popitem(last=False)
        while len(self._tails) > self.max_blocks:
            self._tails.popitem(last=False)

    def replicas_changed(self, replica_ids: Iterable[str]) -> None:
        alive = set(replica_ids)
        for entry in [e for e, owner in self._owners.items() if owner not in alive]:
            del self._owners[entry]
