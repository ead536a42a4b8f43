"""A deployment that says what reached it, for the proxy's edge tests
(tests/test_proxy_edge.py): over HTTP its answer is the request's headers as
JSON; over a WebSocket (any path) the first message is the handshake's
headers as JSON; over gRPC (the classifier example's service) Predict's
`word` is the call's metadata as JSON, and `label` the request's size.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))

from grpc_classifier.classifier_pb2 import PredictReply

from servefleet import deployment

SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"


def _headers(scope) -> bytes:
    seen: dict[str, list[str]] = {}
    for name, value in scope["headers"]:
        seen.setdefault(name.decode("latin-1"), []).append(value.decode("latin-1"))
    return json.dumps(seen).encode()


@deployment
class Edge:
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": _headers(scope).decode()})
            await send({"type": "websocket.close", "code": 1000})
            return
        body = _headers(scope)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def Predict(self, request, grpc_context) -> PredictReply:
        metadata: dict[str, list[str]] = {}
        for key, value in grpc_context.invocation_metadata():
            metadata.setdefault(key, []).append(str(value))
        return PredictReply(label=str(len(request.text)), word=json.dumps(metadata))


app = Edge.bind()
