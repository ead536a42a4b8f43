"""Deployments that read their rank (tests/test_replica_ranks.py)."""

from servefleet import serve


class RankAware:
    def __init__(self) -> None:
        context = serve.get_replica_context()
        self.seen_in_init = (context.rank.rank, context.world_size)
        self.calls: list[tuple[object, int]] = []

    def reconfigure(self, user_config, rank) -> None:
        self.calls.append((user_config, rank.rank))

    def __call__(self) -> dict:
        context = serve.get_replica_context()
        return {"rank": context.rank.rank, "world_size": context.world_size}


class ConfigOnly:
    def __init__(self) -> None:
        self.calls: list[object] = []

    def reconfigure(self, user_config) -> None:
        self.calls.append(user_config)
