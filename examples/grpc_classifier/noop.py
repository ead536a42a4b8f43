"""A Classifier that does nothing, for bench/grpc_plane.py: the same class is
the replica's deployment and the raw grpc.aio server's servicer (the ceiling).
Its methods take (request, context), as a plain gRPC servicer's do; the
replica passes no context to a method without a `grpc_context` parameter, so
the context is optional."""

from __future__ import annotations

from grpc_classifier import classifier_pb2, classifier_pb2_grpc

from servefleet import deployment


class Noop(classifier_pb2_grpc.ClassifierServicer):
    async def Predict(self, request, context=None):
        return classifier_pb2.PredictReply(label="ok")


# As an application (the build names its gRPC services and which RPCs stream).
app = deployment(Noop).options(max_ongoing_requests=100).bind()
