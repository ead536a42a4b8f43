"""How a deployment's `reconfigure` is called, Ray Serve's way: with the
user_config alone, or `reconfigure(user_config, rank)` when it has a
parameter named `rank` (Ray's replica ranks: the rank is a
`servefleet.serve.schema.ReplicaRank`, defined in replica_context.py). Used
by replicas (replica/replica.py) and by local testing mode alike.

When Ray calls it: at start once the constructor returned, and on each
user_config change, if a user_config is set; and when the replica's rank
changes, if a user_config is set and reconfigure takes `rank`. Without a
user_config, reconfigure is never called, rank or not.
"""

from __future__ import annotations

import inspect
from typing import Any

from servefleet._private.replica_context import ReplicaRank


def takes_rank(reconfigure: Any) -> bool:
    """Whether `reconfigure` has a parameter named `rank`."""
    try:
        return "rank" in inspect.signature(reconfigure).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False


def reconfigure_arguments(reconfigure: Any, user_config: Any,
                          rank: int | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments to call `reconfigure` with: (user_config,), plus
    rank=ReplicaRank(rank) when it takes one (None when the replica has no
    rank, as outside a cluster)."""
    if not takes_rank(reconfigure):
        return (user_config,), {}
    return (user_config,), {"rank": ReplicaRank(rank) if rank is not None else None}
