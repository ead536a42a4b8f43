"""All the xDS resources of one Watch state: proxyless gRPC (resources.py) and
an Envoy's HTTP side (envoy_http.py), built from the same snapshots."""

from __future__ import annotations

from servefleet.v1 import watch_pb2

from .envoy_http import http_resources
from .resources import Resources, grpc_resources


def build(routes: watch_pb2.RouteTable | None,
          replica_sets: dict[tuple[str, str], watch_pb2.ReplicaSet]) -> Resources:
    out = Resources()
    if routes is not None:
        grpc_resources(out, routes, replica_sets)
        http_resources(out, routes, replica_sets)
    return out
