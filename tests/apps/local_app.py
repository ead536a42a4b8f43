"""For tests/test_local_run.py: an ingress answering handles (a number) and HTTP
(?x=), which asks a second deployment."""

from __future__ import annotations

from servefleet import deployment


@deployment
class Doubler:
    async def __call__(self, x: int) -> int:
        return 2 * x


@deployment
class Front:
    def __init__(self, doubler) -> None:
        self.doubler = doubler

    async def __call__(self, x) -> dict:
        if hasattr(x, "query_params"):  # an HTTP request
            x = int(x.query_params.get("x", "0"))
        return {"double": await self.doubler.remote(x)}


app = Front.bind(Doubler.bind())
