"""A deployment serving the classifier example's gRPC service, with behaviours
the gRPC ingress tests need, chosen by the request text:

- "sleep:S": answer after S seconds; if the call is cancelled first (client
  gone, deadline), a file named after the request id appears in `marks`;
- "fail": raise ValueError (the caller sees UNKNOWN with the message);
- "code:NAME": answer with the status NAME through grpc_context, details
  "chose NAME" and trailing metadata ("chosen", NAME);
- anything else: the label and the replica (pid) that answered, and in
  `word` the call's x-request-id and application metadata.

PredictStream is a plain (sync) generator: one reply per word.
"""

from __future__ import annotations

import asyncio
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples"))

from grpc_classifier.classifier_pb2 import PredictReply

from servefleet import deployment

SERVICER = "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"


@deployment
class Model:
    def __init__(self, label: str = "v1", marks: str = "", other=None) -> None:
        self.label, self.marks = label, marks

    async def Predict(self, request, grpc_context) -> PredictReply:
        text = request.text
        metadata = dict(grpc_context.invocation_metadata())
        if text.startswith("sleep:"):
            try:
                await asyncio.sleep(float(text.partition(":")[2]))
            except asyncio.CancelledError:
                if self.marks:
                    with open(os.path.join(self.marks, metadata.get("x-request-id", "x")),
                              "w"):
                        pass
                raise
        elif text == "fail":
            raise ValueError("failed on purpose")
        elif text.startswith("code:"):
            name = text.partition(":")[2]
            grpc_context.set_code(grpc.StatusCode[name])
            grpc_context.set_details(f"chose {name}")
            grpc_context.set_trailing_metadata((("chosen", name),))
            return PredictReply()
        return PredictReply(label=self.label, replica=str(os.getpid()),
                            word=f"{metadata.get('x-request-id', '')} "
                                 f"{metadata.get('application', '')}")

    def PredictStream(self, request):
        for word in request.text.split():
            yield PredictReply(label=self.label, word=word, replica=str(os.getpid()))

    async def __call__(self, request) -> dict:
        return {"label": self.label, "http": True}

    def describe(self, prefix: str) -> str:
        """For handle calls (JSON in, JSON out), beside the gRPC methods."""
        return f"{prefix} {self.label}"


def build(args: dict):
    """The application, with the folder for cancellation marks from its args."""
    return Model.bind(marks=args.get("marks", ""))


def split(args: dict):
    """Two deployments of the model (labels "main" and "canary"), for a traffic split."""
    canary = Model.options(name="Canary").bind(label="canary")
    return Model.bind(label="main", other=canary)
