"""Call the classifier example through a proxy's gRPC port with the generated stub.

    python examples/grpc_classifier/client.py [--target 127.0.0.1:9000] [--stream] TEXT
"""

from __future__ import annotations

import argparse
import os
import sys

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from grpc_classifier import classifier_pb2, classifier_pb2_grpc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("text")
    parser.add_argument("--target", default="127.0.0.1:9000", help="the proxy's --grpc-listen")
    parser.add_argument("--application", default="classifier")
    parser.add_argument("--stream", action="store_true", help="call PredictStream")
    args = parser.parse_args()
    metadata = (("application", args.application),)
    with grpc.insecure_channel(args.target) as channel:
        stub = classifier_pb2_grpc.ClassifierStub(channel)
        request = classifier_pb2.PredictRequest(text=args.text)
        try:
            if args.stream:
                for reply in stub.PredictStream(request, metadata=metadata, timeout=10):
                    print(f"{reply.word}: {reply.label} ({reply.score})")
            else:
                reply = stub.Predict(request, metadata=metadata, timeout=10)
                print(f"{reply.label} ({reply.score}) from replica {reply.replica}")
        except grpc.RpcError as e:
            sys.exit(f"{e.code().name}: {e.details()}")


if __name__ == "__main__":
    main()
