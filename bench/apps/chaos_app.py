"""The deployments the chaos suite and the soak serve (bench/chaos.py, bench/soak.py).

- Back: a deployment that answers handle calls with its mark (its
  user_config's "mark"), and streams tokens.
- Front: an ASGI app (Starlette) in front of Back, through a handle:
    GET /             its own mark (one hop)
    GET /compose?w=W  Back's answer for W (two hops, a handle call)
    GET /stream?n=N   N tokens Back streams, one per line (a streamed handle call)
    WS  /ws           every message sent back as it came
- Churn: the deployment the operations loop creates, changes and deletes.

Each of them reads its mark in `reconfigure`, so a Deploy that only changes
user_config is applied in place, and one that changes the version rolls.
"""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from servefleet import deployment, get_deployment_handle


class Marked:
    mark = ""

    def reconfigure(self, config: dict) -> None:
        self.mark = str((config or {}).get("mark", ""))


@deployment
class Back(Marked):
    async def __call__(self, word: str) -> dict:
        return {"word": word, "mark": self.mark}

    async def tokens(self, n: int):
        for i in range(n):
            yield f"t{i}"
            await asyncio.sleep(0.01)


@deployment
class Front(Marked):
    def __init__(self, back: str = "Back", application: str = "chaos") -> None:
        self.back = get_deployment_handle(back, application)
        self.app = Starlette(routes=[
            Route("/", self.own), Route("/compose", self.compose), Route("/stream", self.stream),
            WebSocketRoute("/ws", self.echo)])

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    async def own(self, request) -> JSONResponse:
        return JSONResponse({"mark": self.mark})

    async def compose(self, request) -> JSONResponse:
        return JSONResponse(await self.back.remote(request.query_params.get("w", "x")))

    async def stream(self, request) -> StreamingResponse:
        n = int(request.query_params.get("n", "5"))

        async def lines():
            async for token in self.back.options(stream=True).tokens.remote(n):
                yield token + "\n"
        return StreamingResponse(lines(), media_type="text/plain")

    async def echo(self, ws: WebSocket) -> None:
        await ws.accept()
        try:
            while True:
                await ws.send_text(await ws.receive_text())
        except WebSocketDisconnect:
            return


@deployment
class Churn(Marked):
    async def __call__(self, request) -> dict:
        return {"mark": self.mark}
