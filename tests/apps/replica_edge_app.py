"""Two deployments for the limits on a replica's own ports
(tests/test_replica_edge.py). Front over HTTP answers the size of the body it
read, or, with `?handle=N`, the size Sink reports of N bytes sent to it
through a handle; over gRPC (the classifier example's service) Predict's
`label` is the request's text length.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))

from grpc_classifier.classifier_pb2 import PredictReply

from servefleet import deployment


@deployment
class Sink:
    def size(self, data: bytes) -> int:
        return len(data)


@deployment
class Front:
    def __init__(self, sink) -> None:
        self.sink = sink

    async def __call__(self, request) -> dict:
        sent = int(request.query_params.get("handle", "0"))
        if sent:
            return {"through_handle": await self.sink.size.remote(b"x" * sent)}
        return {"body": len(await request.body())}

    async def Predict(self, request, grpc_context) -> PredictReply:
        return PredictReply(label=str(len(request.text)))


app = Front.bind(Sink.bind())
