"""A Starlette ingress with WebSocket routes, for the WebSocket tests.

- /echo: sends each message back as it came (text or binary); "close:CODE"
  makes the app close with CODE (reason "bye"). It accepts the first
  subprotocol the client offers, with a header of its own.
- /push?n=N&every=S: sends "tick 0".."tick N-1", S seconds apart, then closes 1000.
- /hold: sends its pid, then waits; on the client's disconnect it writes a
  file named after the request id and the close code into `marks`.
- GET /: {"label": "ws_app", "pid": ...} (plain HTTP beside the WebSockets).
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect


class WsApp:
    def __init__(self, marks: str = "") -> None:
        self.marks = Path(marks) if marks else None
        self.app = Starlette(routes=[
            Route("/", lambda request: JSONResponse({"label": "ws_app", "pid": os.getpid()})),
            WebSocketRoute("/echo", self.echo),
            WebSocketRoute("/push", self.push),
            WebSocketRoute("/hold", self.hold),
        ])

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)

    async def echo(self, ws: WebSocket) -> None:
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol=offered[0] if offered else None,
                        headers=[(b"x-app", b"ws_app"), (b"x-root-path",
                                                         ws.scope["root_path"].encode())])
        try:
            while True:
                message = await ws.receive()
                if message["type"] == "websocket.disconnect":
                    return
                text = message.get("text")
                if text is not None and text.startswith("close:"):
                    await ws.close(int(text.split(":", 1)[1]), "bye")
                    return
                if text is not None:
                    await ws.send_text(text)
                else:
                    await ws.send_bytes(message["bytes"])
        except WebSocketDisconnect:
            return

    async def push(self, ws: WebSocket) -> None:
        await ws.accept()
        count = int(ws.query_params.get("n", "10"))
        every = float(ws.query_params.get("every", "0"))
        try:
            for i in range(count):
                await ws.send_text(f"tick {i}")
                if every:
                    await asyncio.sleep(every)
            await ws.close(1000)
        except WebSocketDisconnect:
            return

    async def hold(self, ws: WebSocket) -> None:
        await ws.accept()
        await ws.send_text(str(os.getpid()))
        try:
            while True:
                await ws.receive_text()
        except WebSocketDisconnect as e:
            if self.marks is not None:
                request_id = ws.headers.get("x-request-id", "none")
                (self.marks / f"{request_id}-{e.code}").write_text(str(time.time()))
