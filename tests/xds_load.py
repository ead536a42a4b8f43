"""A proxyless gRPC client for the xDS tests, in a process of its own (gRPC
reads the bootstrap once per process): `xds:///<application>` through the
bootstrap in $GRPC_XDS_BOOTSTRAP_CONFIG, calling Predict back to back from
several callers until stdin closes.

    python tests/xds_load.py APPLICATION [--callers 4] [--text hi]

Every 0.2 s it prints one JSON line: cumulative calls per replica (pid) and
per label, and the failures so far.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import time

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

from grpc_classifier import classifier_pb2, classifier_pb2_grpc


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("application")
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--text", default="hi")
    parser.add_argument("--hop-pass", default="",
                        help="sent with every call (x-servefleet-hop): replicas of a cluster "
                             "with credentials that serve plain text ask for one")
    args = parser.parse_args()
    metadata = (("x-servefleet-hop", args.hop_pass),) if args.hop_pass else ()
    replicas: collections.Counter[str] = collections.Counter()
    labels: collections.Counter[str] = collections.Counter()
    failed: list[str] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_stdin() -> None:
        if not sys.stdin.read(1):  # closed: the test is done
            stop.set()

    loop.add_reader(sys.stdin.fileno(), on_stdin)
    async with grpc.aio.insecure_channel(f"xds:///{args.application}") as channel:
        stub = classifier_pb2_grpc.ClassifierStub(channel)

        async def caller() -> None:
            while not stop.is_set():
                try:
                    reply = await stub.Predict(classifier_pb2.PredictRequest(text=args.text),
                                               timeout=10, metadata=metadata)
                except grpc.aio.AioRpcError as e:
                    failed.append(f"{e.code().name}: {e.details()}")
                    await asyncio.sleep(0.05)
                    continue
                replicas[reply.replica] += 1
                labels[reply.label] += 1

        async def report() -> None:
            while not stop.is_set():
                print(json.dumps({"t": time.time(), "replicas": replicas, "labels": labels,
                                  "failed": failed}), flush=True)
                await asyncio.sleep(0.2)

        await asyncio.gather(report(), *[caller() for _ in range(args.callers)])


if __name__ == "__main__":
    asyncio.run(main())
