"""FastAPI ingress deployments written as Ray Serve's documentation writes them
(`@deployment` above `@ingress(app)`), for tests/test_ingress.py.

- Shop: routes as methods taking `self` (path and query parameters, a
  pydantic body, a WebSocket), a route of the app outside the class, the
  app's lifespan (its state reaches `request.state`), and a plain method for
  handle calls;
- Built: the builder form, `@ingress(build_app)` on a class;
- Standalone: the builder form without a class, `deployment(ingress(build_app)())`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from pydantic import BaseModel

from servefleet import deployment
from servefleet._private.applications.ingress import ingress


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict]:
    yield {"started_in": os.getpid()}


app = FastAPI(lifespan=lifespan)


class Item(BaseModel):
    name: str
    price: float


@app.get("/outside")
def outside(request: Request) -> dict:
    return {"outside": True, "started_in": request.state.started_in}


@deployment(max_ongoing_requests=8)
@ingress(app)
class Shop:
    def __init__(self, owner: str = "shop") -> None:
        self.owner = owner
        self.items: dict[int, Item] = {}

    @app.get("/", name="home")
    def home(self, request: Request) -> dict:
        return {"owner": self.owner, "root_path": request.scope.get("root_path", ""),
                "url": str(request.url_for("home")), "pid": os.getpid()}

    @app.get("/items/{item_id}")
    def get_item(self, item_id: int, q: str | None = None) -> dict:
        item = self.items.get(item_id)
        return {"owner": self.owner, "item_id": item_id, "q": q,
                "item": item.model_dump() if item else None}

    @app.put("/items/{item_id}", status_code=201)
    async def put_item(self, item_id: int, item: Item) -> dict:
        self.items[item_id] = item
        return {"stored": item_id, "count": len(self.items)}

    @app.websocket("/ws/{room}")
    async def chat(self, websocket: WebSocket, room: str) -> None:
        await websocket.accept()
        try:
            async for text in websocket.iter_text():
                await websocket.send_text(f"{self.owner}@{room}: {text}")
        except WebSocketDisconnect:
            return

    def count(self) -> int:
        return len(self.items)


def build_app() -> FastAPI:
    made = FastAPI()

    @made.get("/")
    def hello(request: Request) -> dict:
        return {"built": True, "root_path": request.scope.get("root_path", "")}

    @made.get("/sum/{a}/{b}")
    def add(a: int, b: int) -> int:
        return a + b

    return made


@deployment
@ingress(build_app)
class Built:
    def __init__(self, label: str = "built") -> None:
        self.label = label


Standalone = deployment(name="Standalone")(ingress(build_app)())
