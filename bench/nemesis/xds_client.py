"""The chaos run's proxyless gRPC client (traffic.py's "xds" kind), in a
process of its own because gRPC reads its xDS bootstrap once per process:
`Classifier.Predict` on `xds:///<application>` from a few callers, one call
after another, until stdin closes. Each call is printed as one JSON line
(start, end, ok, error) for the harness to record.

    GRPC_XDS_BOOTSTRAP_CONFIG=... python bench/nemesis/xds_client.py grpc --callers 2

A call that failed because no connection could be made to the replica (it
never left this client) is made again, as a client would, once the
channel has had a moment to learn of another replica; only what follows
counts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from grpc_classifier import classifier_pb2, classifier_pb2_grpc

TIMEOUT_S = 30.0
PAUSE_S = 0.05
NOT_SENT_RETRIES = 3


def _not_sent(e: grpc.aio.AioRpcError) -> bool:
    details = (e.details() or "").lower()
    return e.code() == grpc.StatusCode.UNAVAILABLE and (
        "connection refused" in details or "failed to connect" in details)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("application")
    parser.add_argument("--callers", type=int, default=2)
    args = parser.parse_args()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_stdin() -> None:
        if not sys.stdin.read(1):  # closed: the run is over
            stop.set()

    loop.add_reader(sys.stdin.fileno(), on_stdin)
    async with grpc.aio.insecure_channel(f"xds:///{args.application}") as channel:
        stub = classifier_pb2_grpc.ClassifierStub(channel)

        async def caller() -> None:
            while not stop.is_set():
                start, error = time.time(), ""
                for attempt in range(NOT_SENT_RETRIES + 1):
                    try:
                        await stub.Predict(classifier_pb2.PredictRequest(text="chaos"),
                                           timeout=TIMEOUT_S)
                        error = ""
                        break
                    except grpc.aio.AioRpcError as e:
                        error = f"{e.code().name}: {e.details()}"[:300]
                        if not _not_sent(e) or attempt == NOT_SENT_RETRIES:
                            break
                        await asyncio.sleep(0.2)
                print(json.dumps({"start": start, "end": time.time(), "ok": not error,
                                  "error": error}), flush=True)
                await asyncio.sleep(PAUSE_S)

        await asyncio.gather(*[caller() for _ in range(args.callers)])


if __name__ == "__main__":
    asyncio.run(main())
