"""A FastAPI app as a deployment's ingress, served under its application's route prefix.

With examples/config.yaml (route_prefix /api):

    curl http://127.0.0.1:8000/api/
    curl http://127.0.0.1:8000/api/items/3?q=x
    curl -X POST http://127.0.0.1:8000/api/echo -d '{"a": 1}'

and a WebSocket at ws://127.0.0.1:8000/api/chat that answers each message.
"""

from __future__ import annotations

from fastapi import FastAPI, Request, WebSocket

from servefleet import deployment

api = FastAPI(title="servefleet example")


@api.get("/")
def root(request: Request) -> dict:
    # root_path is the route prefix: links built from it work behind the proxy.
    return {"hello": "from FastAPI", "root_path": request.scope.get("root_path", "")}


@api.get("/items/{item_id}")
def item(item_id: int, q: str | None = None) -> dict:
    return {"item_id": item_id, "q": q}


@api.post("/echo")
async def echo(request: Request) -> dict:
    return {"received": await request.json()}


@api.websocket("/chat")
async def chat(ws: WebSocket) -> None:
    await ws.accept()
    async for text in ws.iter_text():
        await ws.send_text(f"echo: {text}")


@deployment(num_replicas=1)
class Api:
    """A class whose instances are the ASGI app: requests are handed to FastAPI as-is."""

    def __init__(self) -> None:
        self.app = api

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)


app = Api.bind()
