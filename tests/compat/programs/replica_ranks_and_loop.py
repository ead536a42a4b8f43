"""Ray Serve 2.5x's newer replica API: ranks read in __init__ and through
serve.get_replica_context(), reconfigure(user_config, rank), ranks dense again
after a scale-down; a constructor that starts a task on the replica's event
loop and an async __init__; ray.serve.context; handle options Ray accepts."""
import asyncio
from typing import Any

from servefleet import serve
from servefleet.serve.context import _get_internal_replica_context
from servefleet.serve.schema import ReplicaRank


@serve.deployment(num_replicas=3, user_config={"name": "model_v1"})
class Shard:
    def __init__(self):
        context = serve.get_replica_context()
        self.rank = context.rank.rank
        self.world_size = context.world_size
        self.model_name = None
        # Ray runs __init__ on the replica's event loop.
        self.loop = asyncio.get_running_loop()
        self.beats = 0
        self.ticker = asyncio.create_task(self.tick())

    async def tick(self):
        while True:
            self.beats += 1
            await asyncio.sleep(0.05)

    async def reconfigure(self, user_config: Any, rank: ReplicaRank):
        self.rank = rank.rank
        self.model_name = user_config["name"]

    def __call__(self) -> dict:
        context = serve.get_replica_context()
        assert _get_internal_replica_context().replica_id == context.replica_id
        return {"rank": self.rank, "context_rank": context.rank.rank,
                "world_size": context.world_size, "model": self.model_name,
                "beats": self.beats}


@serve.deployment
class AsyncInit:
    async def __init__(self, shard):
        await asyncio.sleep(0.01)
        self.shard = shard.options(_by_reference=False)

    async def __call__(self) -> dict:
        return await self.shard.remote()


def ranks_seen(handle, world_size: int) -> set:
    seen = set()
    for _ in range(200):
        reply = handle.remote().result()
        assert reply["rank"] == reply["context_rank"], reply
        assert reply["world_size"] == world_size, reply
        assert reply["model"] == "model_v1", reply
        seen.add(reply["rank"])
        if len(seen) == world_size:
            break
    return seen


assert _get_internal_replica_context() is None  # not in a replica
handle = serve.run(AsyncInit.bind(Shard.bind()))
assert ranks_seen(handle, 3) == {0, 1, 2}
assert max(handle.remote().result()["beats"] for _ in range(5)) > 0

# Scaled down: ranks are 0..n-1 again, and the world size is the new target.
serve.run(AsyncInit.bind(Shard.options(num_replicas=2).bind()))
deadline = 0
while True:
    try:
        assert ranks_seen(handle, 2) == {0, 1}
        break
    except AssertionError:
        deadline += 1
        if deadline > 50:
            raise
        import time
        time.sleep(0.2)

serve.shutdown()
print("OK")
