"""Which replica addresses a proxy reaches with TLS (pure: no connection is
made): what the replica sets say, per address, for the HTTP hop and the gRPC
one, kept while any deployment still has the address."""

from __future__ import annotations

from servefleet._private.dataplane.grpc_forward import GrpcChannels
from servefleet._private.dataplane.replica_sets import ReplicaSets
from servefleet._private.dataplane.upstream import UpstreamPool
from servefleet._private.wire import replicas_key
from servefleet.v1 import watch_pb2


def _snapshot(deployment: str, *addresses: str, tls: bool = True,
              deleted: bool = False) -> watch_pb2.Snapshot:
    endpoints = [watch_pb2.ReplicaEndpoint(replica_id=f"{deployment}-{i}", http_address=a,
                                           grpc_address=a.replace(":8", ":9"), http_tls=tls)
                 for i, a in enumerate(addresses)]
    return watch_pb2.Snapshot(key=replicas_key("app", deployment), deleted=deleted,
                              replicas=watch_pb2.ReplicaSet(
                                  application="app", deployment=deployment,
                                  max_ongoing_requests=4, endpoints=endpoints))


async def test_an_address_keeps_its_tls_while_any_deployment_has_it() -> None:
    upstream = UpstreamPool()
    sets = ReplicaSets(upstream)
    sets.channels = GrpcChannels()
    sets.apply(_snapshot("A", "10.0.0.1:8001"))
    sets.apply(_snapshot("B", "10.0.0.1:8001", "10.0.0.2:8001"))
    # A drops the address B still has (a resync moving a replica, say).
    sets.apply(_snapshot("A"))
    assert upstream._tls_addresses == {"10.0.0.1:8001", "10.0.0.2:8001"}
    assert sets.channels._tls == {"10.0.0.1:9001", "10.0.0.2:9001"}
    # Gone from every deployment: forgotten.
    sets.apply(_snapshot("B", "10.0.0.2:8001"))
    assert upstream._tls_addresses == {"10.0.0.2:8001"}
    assert sets.channels._tls == {"10.0.0.2:9001"}
    # A replica at that address that serves plain text now: plain both ways.
    sets.apply(_snapshot("B", "10.0.0.2:8001", tls=False))
    assert upstream._tls_addresses == set() and sets.channels._tls == set()
    sets.apply(_snapshot("B", deleted=True))
    assert list(sets.pools) == [("app", "A")]
    await sets.channels.close()
