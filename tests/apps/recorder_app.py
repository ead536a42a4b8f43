"""A deployment with every kind of entry a replica serves, each leaving a
file in `marks` when user code runs (tests/test_fuzz_replica.py: user code
must never run for a caller the replica refused):

- HTTP, any path and method (a Starlette app behind `ingress`): "http-*";
- the WebSocket route /ws, which echoes one message: "ws-*";
- handle calls of `record(*args, **kwargs)`, which takes anything: "method-*";
- the classifier's gRPC service (Predict, PredictStream: "grpc-*") and
  tests/apps/grpc_streams' (Upload, Echo, client and bidirectional
  streaming: "grpc-*").

None of them raises, whatever it is sent: a traceback in the replica's log
is the replica's, never this app's.
"""

from __future__ import annotations

import os
import sys
import uuid

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))

from grpc_classifier.classifier_pb2 import PredictReply
from grpc_streams.streams_pb2 import Chunk, Summary

from servefleet import deployment
from servefleet._private.applications.ingress import ingress

_MARKS: list[str] = []  # the folder, set by the instance (the routes have no `self`)


def _mark(kind: str) -> None:
    if _MARKS:
        with open(os.path.join(_MARKS[0], f"{kind}-{uuid.uuid4().hex}"), "w"):
            pass


async def _http(request: Request) -> PlainTextResponse:
    _mark("http")
    body = await request.body()
    return PlainTextResponse(f"recorded {request.method} {len(body)}")


async def _ws(ws: WebSocket) -> None:
    _mark("ws")
    await ws.accept()
    try:
        message = await ws.receive()
        if message["type"] == "websocket.receive":
            await ws.send_text(str(message.get("text") or len(message.get("bytes") or b"")))
        await ws.close()
    except WebSocketDisconnect:
        return


app = Starlette(routes=[WebSocketRoute("/ws", _ws),
                        Route("/{path:path}", _http, methods=["GET", "POST", "PUT", "DELETE",
                                                              "PATCH", "HEAD", "OPTIONS"])])


@deployment
@ingress(app)
class Recorder:
    def __init__(self, marks: str = "") -> None:
        _MARKS[:] = [marks] if marks else []

    def record(self, *args, **kwargs) -> int:
        _mark("method")
        return len(args) + len(kwargs)

    async def Predict(self, request) -> PredictReply:
        _mark("grpc")
        return PredictReply(label="recorded", word=request.text[:20])

    def PredictStream(self, request):
        _mark("grpc")
        yield PredictReply(label="recorded")

    async def Upload(self, requests) -> Summary:
        _mark("grpc")
        count = 0
        async for _ in requests:
            count += 1
        return Summary(count=count)

    async def Echo(self, requests):
        _mark("grpc")
        async for chunk in requests:
            yield Chunk(seq=chunk.seq)

    def UploadSync(self, requests) -> Summary:
        _mark("grpc")
        return Summary(count=sum(1 for _ in requests))

    def EchoSync(self, requests):
        _mark("grpc")
        for chunk in requests:
            yield Chunk(seq=chunk.seq)


def build(args: dict):
    return Recorder.bind(marks=args.get("marks", ""))
