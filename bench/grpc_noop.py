"""The ceiling of bench/grpc_plane.py: the no-op servicer on a bare grpc.aio server.

    python bench/grpc_noop.py PORT

The servicer (examples/grpc_classifier/noop.py) is the class the replica serves.
"""

from __future__ import annotations

import asyncio
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from grpc_classifier import classifier_pb2_grpc
from grpc_classifier.noop import Noop


async def serve(port: int) -> None:
    server = grpc.aio.server()
    classifier_pb2_grpc.add_ClassifierServicer_to_server(Noop(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
