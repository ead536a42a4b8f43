"""Ray Serve 2.5x's deployment-scoped actors: one shared counter that every
replica of its deployment calls through serve.get_deployment_actor, kept
while replicas come and go, gone with the application. (Ray's actor class
carries @ray.remote; with `import ray` dropped it is a plain class.)"""
from servefleet import serve
from servefleet.serve.config import DeploymentActorConfig


class SharedCounter:
    def __init__(self, start: int = 0):
        self._value = start

    def increment(self) -> int:
        self._value += 1
        return self._value


@serve.deployment(
    num_replicas=2,
    deployment_actors=[
        DeploymentActorConfig(
            name="counter",
            actor_class=SharedCounter,
            init_kwargs={"start": 10},
            actor_options={"num_cpus": 0},
        ),
    ],
)
class SharedCounterDeployment:
    def __init__(self):
        self.cached = serve.get_deployment_actor("counter")

    async def __call__(self) -> dict:
        counter = serve.get_deployment_actor("counter")
        try:
            serve.get_deployment_actor("nope")
        except ValueError as e:
            assert "'counter'" in str(e), e
        else:
            raise AssertionError("an unknown actor name was accepted")
        value = await counter.increment.remote()
        return {"value": value, "replica": serve.get_replica_context().replica_tag}


try:
    serve.get_deployment_actor("counter")
except serve.exceptions.RayServeException:
    pass  # only in a replica, as Ray's
else:
    raise AssertionError("get_deployment_actor worked outside a replica")

handle = serve.run(SharedCounterDeployment.bind())
replies = [handle.remote().result() for _ in range(20)]
# One counter for both replicas: 11, 12, ... with no value twice.
assert [r["value"] for r in replies] == list(range(11, 31)), replies
assert len({r["replica"] for r in replies}) == 2, "both replicas were called"

# Scaled up: the new replica shares the same counter.
serve.run(SharedCounterDeployment.options(num_replicas=3).bind())
assert handle.remote().result()["value"] == 31

serve.delete("default")
assert "default" not in serve.status().applications
serve.shutdown()
print("OK")
