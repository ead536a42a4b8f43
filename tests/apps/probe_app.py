"""A deployment that reports what it may open and who it runs as
(tests/test_sandbox.py): user code trying to read the controller's secrets."""

from __future__ import annotations

import os

import grpc

from servefleet._private.security.tls import Credentials
from servefleet.v1 import controller_pb2_grpc, watch_pb2


def _opens(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as e:
        return f"denied: {e.strerror}"
    return "read"


def _watch(controller: str, key: str) -> str:
    """Watch `key` as this replica (its own credentials): the first answer's kind."""
    credentials = Credentials.from_env()
    with credentials.channel(controller) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        try:
            stream = stub.Watch(watch_pb2.WatchRequest(known={key: ""}),
                                metadata=credentials.metadata, timeout=5)
            return next(stream).WhichOneof("event") or "nothing"
        except grpc.RpcError as e:
            return e.code().name


class Probe:
    def __call__(self, request) -> dict:
        paths = request.query_params.getlist("path")
        controller = request.query_params.get("controller", "")
        return {"uid": os.getuid(), "home": os.environ.get("HOME", ""),
                "opens": {path: _opens(path) for path in paths},
                "servefleet_env": sorted(k for k in os.environ if k.startswith("SERVEFLEET")),
                "threads": {k: os.environ.get(k) for k in ("OMP_NUM_THREADS",
                                                          "OPENBLAS_NUM_THREADS")},
                "watch": {key: _watch(controller, key)
                          for key in request.query_params.getlist("watch")}}
