"""A DeploymentResponse passed straight into another call, and handles
held by the ingress."""
import requests
from starlette.requests import Request

from servefleet import serve
from servefleet.serve.handle import DeploymentHandle


@serve.deployment
class Adder:
    def __init__(self, increment: int):
        self.increment = increment

    def add(self, value: int) -> int:
        return value + self.increment


@serve.deployment
class Multiplier:
    def __init__(self, factor: int):
        self.factor = factor

    def multiply(self, value: int) -> int:
        return value * self.factor


@serve.deployment
class Pipeline:
    def __init__(self, adder: DeploymentHandle, multiplier: DeploymentHandle):
        self.adder = adder
        self.multiplier = multiplier

    async def __call__(self, request: Request) -> dict:
        value = int(request.query_params["value"])
        added = self.adder.add.remote(value)
        # The response goes in unawaited: servefleet resolves it first.
        result = await self.multiplier.multiply.remote(added)
        return {"result": result}


app = Pipeline.bind(Adder.bind(2), Multiplier.bind(10))
handle = serve.run(app)
assert requests.get("http://127.0.0.1:8000/?value=3").json() == {"result": 50}
serve.shutdown()
print("OK")
