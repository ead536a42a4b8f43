"""serve.run(app, _local_testing_mode=True): the application in this process,
as Ray's local testing mode runs it (no controller, no proxy, no child
process). Pure in-process tests."""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
import time

import pytest

from servefleet import serve
from servefleet.serve.exceptions import RayServeException, RequestCancelledError
from servefleet.serve.handle import DeploymentHandle, DeploymentResponse


@pytest.fixture(autouse=True)
def _clean():
    yield
    serve.shutdown()


@serve.deployment
class Tokenizer:
    def split(self, text: str) -> list:
        return text.split()

    def numbers(self, n: int):
        yield from range(n)

    async def tens(self, n: int):
        for i in range(n):
            yield i * 10

    def where(self) -> str:
        ctx = serve.get_replica_context()
        return f"{ctx.app_name}/{ctx.deployment}/{ctx.servable_object is self}"


@serve.deployment(user_config={"factor": 3})
class Counter:
    def __init__(self, tokenizer: DeploymentHandle, *, start: int = 0) -> None:
        self.tokenizer = tokenizer
        self.start = start
        self.factor = 1

    def reconfigure(self, config: dict) -> None:
        self.factor = config["factor"]

    async def __call__(self, text: str) -> int:
        return self.start + self.factor * len(await self.tokenizer.split.remote(text))

    def count_sync(self, text: str) -> int:
        # Sync code waits on a handle call to another deployment.
        return len(self.tokenizer.split.remote(text).result())

    def process(self) -> int:
        return os.getpid()


def test_run_returns_a_local_handle_to_the_ingress_with_its_dependencies_constructed() -> None:
    handle = serve.run(Counter.bind(Tokenizer.bind(), start=100), _local_testing_mode=True)
    assert isinstance(handle, DeploymentHandle)
    response = handle.remote("one two three")
    assert isinstance(response, DeploymentResponse)
    assert response.result() == 109  # user_config applied through reconfigure
    assert handle.count_sync.remote("a b").result(timeout_s=10) == 2
    assert handle.process.remote().result() == os.getpid()  # in this process


async def test_await_a_response_and_compose_with_a_response_as_argument() -> None:
    @serve.deployment
    class Adder:
        def __call__(self, x: int, y: int = 0) -> int:
            return x + y

    @serve.deployment
    class Pipeline:
        def __init__(self, adder: DeploymentHandle) -> None:
            self.adder = adder

        async def __call__(self, x: int) -> int:
            first = self.adder.remote(x, y=1)
            # Passed on unawaited: resolved before the second call runs.
            return await self.adder.remote(first, y=first)

    handle = serve.run(Pipeline.bind(Adder.bind()), _local_testing_mode=True)
    assert await handle.remote(5) == 12
    with pytest.raises(RuntimeError, match="await response"):
        handle.remote(1).result()  # would block this event loop


def test_streaming_sync_and_async_generators() -> None:
    handle = serve.run(Tokenizer.bind(), _local_testing_mode=True)
    streaming = handle.options(stream=True)
    assert list(streaming.numbers.remote(4)) == [0, 1, 2, 3]

    async def collect() -> list:
        return [item async for item in streaming.tens.remote(3)]

    assert asyncio.run(collect()) == [0, 10, 20]
    with pytest.raises(TypeError, match="stream=True"):
        handle.numbers.remote(2).result()
    with pytest.raises(TypeError, match="did not return a generator"):
        list(streaming.split.remote("a b"))


def test_a_consumer_leaving_a_stream_early_closes_the_generator() -> None:
    closed = threading.Event()

    @serve.deployment
    class Endless:
        def __call__(self):
            try:
                n = 0
                while True:
                    yield n
                    n += 1
            finally:
                closed.set()

    handle = serve.run(Endless.bind(), _local_testing_mode=True)
    stream = handle.options(stream=True).remote()
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    stream.cancel()
    assert closed.wait(5)


def test_batch_and_multiplexed_methods_work_locally() -> None:
    @serve.deployment
    class Model:
        def __init__(self) -> None:
            self.loads: list[str] = []

        @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.5)
        async def predict(self, xs: list[int]) -> list[tuple[int, int]]:
            return [(x * 2, len(xs)) for x in xs]

        @serve.multiplexed(max_num_models_per_replica=2)
        async def get_model(self, model_id: str) -> str:
            self.loads.append(model_id)
            return f"model-{model_id}"

        async def which(self) -> tuple[str, str, list[str]]:
            model_id = serve.get_multiplexed_model_id()
            return model_id, await self.get_model(model_id), list(self.loads)

    handle = serve.run(Model.bind(), _local_testing_mode=True)

    async def batch_of_four() -> list:
        return await asyncio.gather(*[handle.predict.remote(i) for i in range(4)])

    assert asyncio.run(batch_of_four()) == [(0, 4), (2, 4), (4, 4), (6, 4)]
    first = handle.options(multiplexed_model_id="a").which.remote().result()
    again = handle.options(multiplexed_model_id="a").which.remote().result()
    assert first == ("a", "model-a", ["a"])
    assert again == ("a", "model-a", ["a"])  # loaded once


def test_replica_context_inside_and_outside() -> None:
    handle = serve.run(Tokenizer.bind(), name="words", _local_testing_mode=True)
    assert handle.where.remote().result() == "words/Tokenizer/True"
    with pytest.raises(RayServeException, match="get_replica_context"):
        serve.get_replica_context()


def test_lookups_find_local_applications_and_delete_stops_them() -> None:
    serve.run(Counter.bind(Tokenizer.bind()), name="app", _local_testing_mode=True)
    assert serve.get_app_handle("app").remote("x y").result() == 6
    assert serve.get_deployment_handle("Tokenizer", app_name="app").split.remote(
        "p q").result() == ["p", "q"]
    serve.delete("app")
    with pytest.raises(RayServeException):
        serve.get_app_handle("app")


def test_run_under_the_same_name_replaces_the_application() -> None:
    @serve.deployment
    class One:
        def __call__(self) -> int:
            return 1

    @serve.deployment
    class Two:
        def __call__(self) -> int:
            return 2

    old = serve.run(One.bind(), name="n", _local_testing_mode=True)
    new = serve.run(Two.bind(), name="n", _local_testing_mode=True)
    assert new.remote().result() == 2
    with pytest.raises(RayServeException, match="not running"):
        old.remote()


def test_arguments_travel_pickled_and_handles_pickle_to_themselves() -> None:
    @serve.deployment
    class Keeper:
        def __init__(self) -> None:
            self.seen: list = []

        def keep(self, value: list) -> int:
            self.seen.append(value)
            return len(self.seen)

        def last(self) -> list:
            return self.seen[-1]

    handle = serve.run(Keeper.bind(), _local_testing_mode=True)
    mine = [1, 2]
    handle.keep.remote(mine).result()
    mine.append(3)  # the deployment got a copy, as from a real call
    assert handle.last.remote().result() == [1, 2]
    with pytest.raises(Exception, match=r"pickle|lock"):
        handle.keep.remote(threading.Lock()).result()
    copy = pickle.loads(pickle.dumps(handle.keep))
    assert copy.remote(["x"]).result() == 2  # the lock never reached it


def test_constructor_errors_raise_from_run_and_leave_nothing_running() -> None:
    @serve.deployment
    class Broken:
        def __init__(self) -> None:
            raise ValueError("no model file")

    before = threading.active_count()
    with pytest.raises(ValueError, match="no model file"):
        serve.run(Broken.bind(), _local_testing_mode=True)
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before


def test_cancel_and_timeout() -> None:
    started = threading.Event()

    @serve.deployment
    class Slow:
        async def __call__(self) -> str:
            started.set()
            await asyncio.sleep(30)
            return "late"

    handle = serve.run(Slow.bind(), _local_testing_mode=True)
    response = handle.remote()
    with pytest.raises(TimeoutError):
        response.result(timeout_s=0.1)
    assert started.wait(5)
    response.cancel()
    with pytest.raises(RequestCancelledError):
        response.result()


def test_missing_method_user_config_without_reconfigure_and_bad_run_arguments() -> None:
    handle = serve.run(Tokenizer.bind(), _local_testing_mode=True)
    with pytest.raises(RayServeException, match=r"no method 'nope'.*split"):
        handle.nope.remote().result()

    @serve.deployment(user_config={"a": 1})
    class NoReconfigure:
        pass

    with pytest.raises(ValueError, match="reconfigure"):
        serve.run(NoReconfigure.bind(), _local_testing_mode=True)
    with pytest.raises(TypeError, match=r"\.bind\(\)"):
        serve.run(Tokenizer, _local_testing_mode=True)  # type: ignore[arg-type]
    with pytest.raises(RayServeException, match="non-empty"):
        serve.run(Tokenizer.bind(), name="", _local_testing_mode=True)
    with pytest.raises(ValueError, match="route_prefix"):
        serve.run(Tokenizer.bind(), route_prefix="api", _local_testing_mode=True)


def test_function_deployments() -> None:
    @serve.deployment
    def double(x: int) -> int:
        return 2 * x

    handle = serve.run(double.bind(), _local_testing_mode=True)
    assert handle.remote(21).result() == 42
    with pytest.raises(RayServeException, match="only __call__"):
        handle.other.remote().result()
