"""A deployment that answers with its replica id (tests/test_routing_e2e.py),
slowly when the file named by ROUTED_SLOW_FILE names this replica; and an
ingress that calls it through a handle with a routing key."""

import asyncio
import os

from starlette.requests import Request

from servefleet import deployment
from servefleet._private import replica_context


def _me() -> str:
    identity = replica_context.current()
    return identity.replica_id if identity else ""


def _slow() -> bool:
    """Whether the file ROUTED_SLOW_FILE names (if any) names this replica."""
    slow = os.environ.get("ROUTED_SLOW_FILE", "")
    return bool(slow) and os.path.exists(slow) and open(slow).read().strip() == _me()


@deployment
class Routed:
    async def __call__(self, request: Request) -> dict:
        return await self.whoami()

    async def whoami(self) -> dict:
        if _slow():
            await asyncio.sleep(0.3)
        return {"replica": _me()}


@deployment
class Caller:
    def __init__(self, routed) -> None:
        self.routed = routed

    async def __call__(self, request: Request) -> dict:
        key = request.query_params.get("key", "")
        return await self.routed.options(method_name="whoami", routing_key=key).remote()


app = Caller.bind(Routed.bind())
