"""A proxyless gRPC client for the streaming xDS test, in a process of its own
(gRPC reads the xDS bootstrap, $GRPC_XDS_BOOTSTRAP_CONFIG, once per process):
the calls of tests/grpc_stream_calls.py against `xds:///<application>`, with
no proxy between client and replica. Prints one JSON object of results.

    python tests/xds_streams.py APPLICATION MARKS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import grpc
import grpc_stream_calls as calls
from grpc_streams import streams_pb2_grpc


def main() -> None:
    application, marks = sys.argv[1], Path(sys.argv[2])
    with grpc.insecure_channel(f"xds:///{application}") as channel:
        stub = streams_pb2_grpc.StreamsStub(channel)
        grpc.channel_ready_future(channel).result(timeout=30)
        summary, ahead = calls.upload_with_back_pressure(stub, (), marks)
        echoes = calls.echo(stub, (), method="EchoSync")
        calls.cancel_held(stub, (), "proxyless-gone")
        code, details, echoed, sent = calls.stopped_by_the_replica(stub, ())
    print(json.dumps({
        "upload": [summary.count, summary.bytes, summary.in_order], "ahead": ahead,
        "echoes": echoes, "stopped": [code.name, details, echoed, sent]}))


if __name__ == "__main__":
    main()
