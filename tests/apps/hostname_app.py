"""A deployment that answers with the name of the host it runs on (a Pod's
name, on Kubernetes) and its replica id: tests/test_k8s_runtime.py."""

import socket

from starlette.requests import Request

from servefleet import deployment
from servefleet._private import replica_context


@deployment
class Hostname:
    async def __call__(self, request: Request) -> dict:
        identity = replica_context.current()
        return {"host": socket.gethostname(),
                "replica": identity.replica_id if identity else ""}


app = Hostname.bind()
