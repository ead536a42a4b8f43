"""Deployment-scoped actors are per version of their deployment, as Ray Serve
keys them by code version: a new version gets new actors, while a replica
of the old version that still serves a request calls the old version's
actor; the old actor goes once the old replicas are gone. A new replica
count at the same version keeps the actors."""
import asyncio
import time

from servefleet import serve
from servefleet.serve.config import DeploymentActorConfig


class SharedCounter:
    def __init__(self, start: int = 0):
        self._value = start

    def increment(self) -> int:
        self._value += 1
        return self._value


@serve.deployment(
    version="1",
    graceful_shutdown_wait_loop_s=0.5,
    graceful_shutdown_timeout_s=20,
    deployment_actors=[
        DeploymentActorConfig(name="counter", actor_class=SharedCounter,
                              init_kwargs={"start": 10}),
    ],
)
class Counted:
    def __init__(self, label: str):
        self.label = label

    async def __call__(self, wait_s: float = 0.0) -> dict:
        await asyncio.sleep(wait_s)
        value = await serve.get_deployment_actor("counter").increment.remote()
        return {"label": self.label, "value": value}


def actor_deployments() -> set:
    found = serve.status().applications["default"].deployments
    return {name for name in found if name.startswith("Counted-counter")}


handle = serve.run(Counted.bind("v1"))
assert [handle.remote().result()["value"] for _ in range(3)] == [11, 12, 13]
(first_actor,) = actor_deployments()
held = handle.remote(4.0)  # still running on the v1 replica through the rollout
time.sleep(0.5)

handle = serve.run(Counted.options(version="2").bind("v2"))
# The new version counts on an actor of its own, from its constructor.
assert handle.remote().result() == {"label": "v2", "value": 11}
assert first_actor in actor_deployments(), "the old actor went before its replicas"
# The v1 replica, draining, finishes the held request on the v1 actor.
assert held.result() == {"label": "v1", "value": 14}

# Once the v1 replica is gone, so is its actor.
deadline = time.monotonic() + 60
while first_actor in actor_deployments():
    assert time.monotonic() < deadline, actor_deployments()
    time.sleep(0.2)
assert len(actor_deployments()) == 1

# The same version with more replicas: the same actor.
handle = serve.run(Counted.options(version="2", num_replicas=2).bind("v2"))
assert [handle.remote().result()["value"] for _ in range(3)] == [12, 13, 14]
serve.shutdown()
print("OK")
