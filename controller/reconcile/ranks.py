"""Replica ranks (Ray Serve's): which rank a new replica takes, and which
replicas move once their deployment is settled. Pure functions of the
deployment's replica views; the replica reconciler (replicas.py) writes the
ranks into the replicas' records (hard state) and tells the replicas
(Reconfigure).

The rules, as Ray Serve documents them:

- a rank is unique among the deployment's replicas that are not stopping,
  whatever their version; a new replica takes the lowest free rank;
- a replica keeps its rank for its life, but for one case: once the
  deployment is HEALTHY (every replica current and running, as many as the
  target), replicas whose rank is at or past the target (left so by a
  scale-down or a rollout) or that have none (started before ranks) move to
  the lowest free ranks below the target, lowest first, so that ranks are
  0..n-1 again; replicas already below the target keep theirs;
- the world size is the target count, whatever is running.

Ranks live in the replica records, so a new leader goes on with the ranks
the replicas have: nothing is derived again after a failover.
"""

from __future__ import annotations

from collections.abc import Iterable

NO_RANK = -1


def lowest_free(taken: Iterable[int]) -> int:
    """The lowest rank not in `taken`."""
    used = set(taken)
    rank = 0
    while rank in used:
        rank += 1
    return rank


def compacted(ranks: dict[str, int], target: int) -> dict[str, int]:
    """The replicas (by id) whose rank must change for ranks to be 0..n-1,
    with their new ranks; empty when they already are. `ranks` holds every
    replica of a settled deployment (NO_RANK: none); a rank held twice (not
    possible but for records written by hand) counts as none for all but the
    replica with the lowest id."""
    keep: dict[int, str] = {}
    moving: list[tuple[int, str]] = []
    for replica_id, rank in sorted(ranks.items(), key=lambda item: (item[1], item[0])):
        if 0 <= rank < target and rank not in keep:
            keep[rank] = replica_id
        else:
            moving.append((rank if rank >= 0 else 1 << 62, replica_id))
    free = (r for r in range(max(target, len(ranks))) if r not in keep)
    return {replica_id: next(free) for _, replica_id in sorted(moving)}
