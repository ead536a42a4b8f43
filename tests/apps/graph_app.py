"""Applications built with the Python API, for the build-step and application tests."""

from __future__ import annotations

from servefleet import deployment


@deployment(num_replicas=2, user_config={"scale": 1})
class Adder:
    def __init__(self, increment: int) -> None:
        self.increment = increment
        self.scale = 1

    def reconfigure(self, config: dict) -> None:
        self.scale = config.get("scale", 1)

    def add(self, x: int) -> int:
        return (x + self.increment) * self.scale

    async def __call__(self, x: int) -> int:
        return self.add(x)


@deployment(max_ongoing_requests=20)
class Front:
    def __init__(self, adder, label: str = "front") -> None:
        self.adder = adder
        self.label = label

    async def __call__(self, request) -> dict:
        x = int(request.query_params.get("x", "0"))
        called = await self.adder.remote(x)
        named = await self.adder.add.remote(x)
        return {"label": self.label, "call": called, "method": named}


@deployment
def hello(request) -> str:
    return "hello"


@deployment
async def sleepy(request) -> str:
    import asyncio

    await asyncio.sleep(float(request.query_params.get("s", "0")))
    return "awake"


app = Front.bind(Adder.bind(10))
two_adders = Front.bind({"a": Adder.bind(1), "b": Adder.bind(2)})


def builder(args: dict):
    return Front.bind(Adder.bind(int(args.get("increment", 1))), label=args.get("label", "b"))


not_an_app = 42


@deployment
class SyncFront:
    """Plain (sync) code calling a handle: runs in a thread, blocks on .result()."""

    def __init__(self, adder) -> None:
        self.adder = adder

    def __call__(self, request) -> dict:
        x = int(request.query_params.get("x", "0"))
        return {"call": self.adder.remote(x).result(timeout=30)}


sync_app = SyncFront.bind(Adder.bind(100))
