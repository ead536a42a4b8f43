"""Calls of tests/apps/grpc_streams' service that the streaming tests make,
through the proxy (tests/test_grpc_streams.py) and proxyless
(tests/xds_streams.py): each returns what the test asserts on."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb

APPS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "apps")
sys.path.insert(0, APPS)

from grpc_streams import streams_pb2 as pb  # noqa: E402

Metadata = Sequence[tuple[str, str]]
SERVICER = "grpc_streams.streams_pb2_grpc:add_StreamsServicer_to_server"


def streams_application(marks: Path, replicas: int = 1,
                        max_ongoing: int = 8) -> apb.ApplicationSpec:
    """The application of tests/apps/streams_app.py; cancelled calls leave marks in `marks`."""
    return apb.ApplicationSpec(
        name="streams", import_path="streams_app:build",
        args_json=json.dumps({"marks": str(marks)}), grpc_servicer_functions=[SERVICER],
        runtime=dpb.RuntimeOptions(working_dir=APPS),
        deployments=[apb.DeploymentOverride(
            name="Streams", replica_config=dpb.ReplicaConfig(
                num_replicas=replicas, max_ongoing_requests=max_ongoing,
                graceful_shutdown_wait_loop_s=0.1, graceful_shutdown_timeout_s=5))])


@dataclass
class Pulls:
    """When gRPC took each message from the client's request iterator."""

    times: list[float] = field(default_factory=list)

    def settled(self, total: int, quiet_s: float = 1.0, limit_s: float = 60) -> int:
        """How many messages gRPC took once it stopped taking more for
        `quiet_s` (or took all `total`): a stall is a wait for the peer's
        flow-control window, or a client starved of CPU; either way it sent
        no more than this before the peer read on."""
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            seen = len(self.times)
            if seen >= total or (seen and time.monotonic() - self.times[-1] >= quiet_s):
                return seen
            time.sleep(0.05)
        raise AssertionError(f"the client was still sending after {limit_s} s")


def chunks(n: int, size: int, text: str, pulls: Pulls | None = None,
           then: threading.Event | None = None) -> Iterator[pb.Chunk]:
    """n chunks (the first carrying `text`), noting each pull; with `then`,
    the stream stays open after them until the event is set."""
    data = b"x" * size
    for seq in range(n):
        if pulls is not None:
            pulls.times.append(time.monotonic())
        yield pb.Chunk(seq=seq, data=data, text=text if seq == 0 else "")
    if then is not None:
        then.wait(60)


def upload_with_back_pressure(stub, metadata: Metadata, marks: Path, n: int = 10_000,
                              size: int = 16384, after: int = 100, method: str = "Upload"
                              ) -> tuple[pb.Summary, int]:
    """Upload n chunks to a replica that stops reading after `after` until
    told to read on (a file in `marks`): returns the summary and how many
    chunks the client had sent while the replica was not reading."""
    pulls, name = Pulls(), f"read-on-{method}-{time.monotonic_ns()}"
    future = getattr(stub, method).future(chunks(n, size, f"until:{name}@{after}", pulls),
                                          metadata=metadata, timeout=120)
    try:
        ahead = pulls.settled(n)
    finally:
        (marks / name).touch()
    return future.result(timeout=120), ahead


def echo(stub, metadata: Metadata, n: int = 1000, method: str = "Echo",
         timeout: float = 60) -> list[int]:
    """Send n chunks and read the echoes: their seqs, in the order they came."""
    return [c.seq for c in getattr(stub, method)(chunks(n, 16, ""), metadata=metadata,
                                                 timeout=timeout)]


def cancel_held(stub, metadata: Metadata, request_id: str, method: str = "Upload") -> None:
    """Start a call the replica holds, then cancel it from the client."""
    release = threading.Event()
    future = getattr(stub, method).future(
        chunks(1, 16, "hold", then=release), timeout=60,
        metadata=(*metadata, ("x-request-id", request_id)))
    time.sleep(1.5)
    future.cancel()
    release.set()


def stopped_by_the_replica(stub, metadata: Metadata, text: str = "stop@5",
                           method: str = "Echo") -> tuple[grpc.StatusCode, str, int, int]:
    """An endless stream the replica ends: (status, details, echoes read,
    chunks the client's iterator gave)."""
    pulls = Pulls()
    echoes = 0
    try:
        answer = getattr(stub, method)(chunks(10**7, 16, text, pulls), metadata=metadata,
                                       timeout=60)
        for _ in [] if isinstance(answer, pb.Summary) else answer:
            echoes += 1
    except grpc.RpcError as e:
        time.sleep(0.5)  # the client's iterator is not pulled any more
        return e.code(), e.details() or "", echoes, len(pulls.times)
    raise AssertionError("the replica did not end the call")
