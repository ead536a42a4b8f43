"""Deployment-scoped actors in _local_testing_mode: the actor runs in this
process, constructed once before its deployment; every call to
serve.get_deployment_actor reaches the same object, plain methods run one
at a time (Ray's actor default), an unknown name is a ValueError naming the
actors the deployment has."""
import threading
import time

from servefleet import serve
from servefleet.serve.config import DeploymentActorConfig

made = []


class SharedCounter:
    def __init__(self, start: int = 0):
        made.append(start)
        self._value = start
        self._inside = 0
        self._lock = threading.Lock()

    def increment(self) -> int:
        with self._lock:
            self._inside += 1
            overlapping = self._inside > 1
        time.sleep(0.02)  # a second call at once would be seen inside
        self._value += 1
        with self._lock:
            self._inside -= 1
        assert not overlapping, "two calls ran at once in a plain actor"
        return self._value


@serve.deployment(deployment_actors=[
    DeploymentActorConfig(name="counter", actor_class=SharedCounter, init_args=(10,)),
])
class Counted:
    def __init__(self):
        self.counter = serve.get_deployment_actor("counter")

    async def __call__(self) -> int:
        try:
            serve.get_deployment_actor("nope")
        except ValueError as e:
            assert "'counter'" in str(e), e
        else:
            raise AssertionError("an unknown actor name was accepted")
        return await serve.get_deployment_actor("counter").increment.remote()

    def plain(self) -> int:  # from sync code: .result()
        return self.counter.increment.remote().result()


handle = serve.run(Counted.bind(), _local_testing_mode=True)
assert made == [10], made  # constructed once, before its deployment
responses = [handle.remote() for _ in range(5)] + [handle.plain.remote() for _ in range(5)]
assert sorted(r.result() for r in responses) == list(range(11, 21))
assert made == [10], made

# Run again: a new application, a new actor from its constructor.
handle = serve.run(Counted.bind(), _local_testing_mode=True)
assert handle.remote().result() == 11
assert made == [10, 10], made
serve.delete("default")
print("OK")
