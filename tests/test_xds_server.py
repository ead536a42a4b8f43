"""The xDS server without a cluster: the resources built from Watch snapshots
(pure), and the ADS stream's versions, ACKs and NACKs against a real grpc.aio
server and client in this process."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest
from envoy.admin.v3 import config_dump_shared_pb2 as dump
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from envoy.service.status.v3 import csds_pb2
from google.protobuf import any_pb2, json_format
from google.rpc import status_pb2

from servefleet._private.testing import free_port
from servefleet._private.wire import ROUTES_KEY, replicas_key
from servefleet._private.xds_bootstrap import CERTIFICATE_PROVIDER
from servefleet.controller.watch import Publisher
from servefleet.controller.xds.ads import AggregatedDiscovery
from servefleet.controller.xds.build import build
from servefleet.controller.xds.csds import ClientStatus
from servefleet.controller.xds.resources import CLUSTER, ENDPOINTS, LISTENER, ROUTE
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import watch_pb2


def _routes(split: bool = False) -> watch_pb2.RouteTable:
    route = watch_pb2.GrpcRoute(application="clf", deployment="Model",
                                services=["pkg.Classifier"])
    if split:
        route.split.extend([apb.WeightedDeployment(deployment="Model", weight=80),
                            apb.WeightedDeployment(deployment="Canary", weight=20)])
    return watch_pb2.RouteTable(grpc_routes=[route])


def _replicas(*addresses: str) -> watch_pb2.ReplicaSet:
    return watch_pb2.ReplicaSet(application="clf", deployment="Model", endpoints=[
        watch_pb2.ReplicaEndpoint(replica_id=f"r{i}", http_address="h:1", grpc_address=a)
        for i, a in enumerate(addresses)])


def _unpack(resource, message):
    out = message()
    assert resource.packed.Unpack(out)
    return out


def test_resources_for_an_application_and_its_split() -> None:
    built = build(_routes(), {("clf", "Model"): _replicas("127.0.0.1:5001", "127.0.0.1:5002")})
    listener = _unpack(built.by_type[LISTENER]["clf"], listener_pb2.Listener)
    manager = hcm_pb2.HttpConnectionManager()
    assert listener.api_listener.api_listener.Unpack(manager)
    assert manager.rds.route_config_name == "clf" and manager.rds.config_source.HasField("ads")
    assert manager.http_filters[-1].name == "envoy.filters.http.router"
    route = _unpack(built.by_type[ROUTE]["clf"], route_pb2.RouteConfiguration)
    action = route.virtual_hosts[0].routes[0].route
    assert action.cluster == "clf/Model" and action.retry_policy.retry_on == "resource-exhausted"
    cluster = _unpack(built.by_type[CLUSTER]["clf/Model"], cluster_pb2.Cluster)
    assert cluster.type == cluster_pb2.Cluster.EDS
    load = _unpack(built.by_type[ENDPOINTS]["clf/Model"], endpoint_pb2.ClusterLoadAssignment)
    assert load.endpoints[0].load_balancing_weight.value == 1
    assert [e.endpoint.address.socket_address.port_value
            for e in load.endpoints[0].lb_endpoints] == [5001, 5002]
    # Content digests: the same state gives the same versions (a new leader's too).
    again = build(_routes(), {("clf", "Model"): _replicas("127.0.0.1:5002", "127.0.0.1:5001")})
    assert {n: r.version for n, r in again.by_type[ENDPOINTS].items()} == \
        {n: r.version for n, r in built.by_type[ENDPOINTS].items()}
    split = build(_routes(split=True), {})
    weighted = _unpack(split.by_type[ROUTE]["clf"], route_pb2.RouteConfiguration
                       ).virtual_hosts[0].routes[0].route.weighted_clusters.clusters
    assert [(c.name, c.weight.value) for c in weighted] == [("clf/Model", 8000),
                                                           ("clf/Canary", 2000)]
    assert set(split.by_type[CLUSTER]) == {"clf/Model", "clf/Canary"}
    assert build(None, {}).by_type[LISTENER] == {}


def test_a_cluster_of_replicas_serving_tls_asks_for_mutual_tls() -> None:
    plain = build(_routes(), {("clf", "Model"): _replicas("127.0.0.1:5001")})
    assert not _unpack(plain.by_type[CLUSTER]["clf/Model"], cluster_pb2.Cluster
                       ).HasField("transport_socket")
    replicas = _replicas("127.0.0.1:5001")
    replicas.endpoints[0].http_tls = True
    built = build(_routes(), {("clf", "Model"): replicas})
    socket = _unpack(built.by_type[CLUSTER]["clf/Model"], cluster_pb2.Cluster).transport_socket
    context = tls_pb2.UpstreamTlsContext()
    assert socket.name == "envoy.transport_sockets.tls" and socket.typed_config.Unpack(context)
    common = context.common_tls_context
    assert common.tls_certificate_provider_instance.instance_name == CERTIFICATE_PROVIDER
    validation = common.validation_context
    assert validation.ca_certificate_provider_instance.instance_name == CERTIFICATE_PROVIDER
    assert [m.exact for m in validation.match_subject_alt_names] == ["replica.servefleet"]


@pytest.fixture
async def ads():
    publisher = Publisher()
    publisher.publish(ROUTES_KEY, routes=_routes())
    publisher.publish(replicas_key("clf", "Model"), replicas=_replicas("127.0.0.1:5001"))

    async def refuse(context) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, "not the leader")

    service = AggregatedDiscovery(lambda: publisher, lambda: True, refuse)
    async with served_ads(service) as stub:
        yield publisher, stub, service


@contextlib.asynccontextmanager
async def served_ads(service: AggregatedDiscovery):
    """`service` on a real grpc.aio server on loopback; a stub of it."""
    server = grpc.aio.server()
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(service, server)
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    finally:
        await channel.close()
        await server.stop(0)


class Stream:
    """An ADS stream whose responses a task reads into a queue (cancelling a
    read of a grpc.aio call would cancel the call)."""

    def __init__(self, stub) -> None:
        self.call = stub.StreamAggregatedResources()
        self.got: asyncio.Queue = asyncio.Queue()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for response in self.call:
            await self.got.put(response)

    async def write(self, request) -> None:
        await self.call.write(request)

    async def next(self, timeout: float = 2.0):
        return await asyncio.wait_for(self.got.get(), timeout)

    async def quiet(self, seconds: float = 0.5) -> None:
        await asyncio.sleep(seconds)
        assert self.got.empty(), self.got.get_nowait()

    def close(self) -> None:
        self.call.cancel()
        self._reader.cancel()


async def test_versions_acks_and_nacks(ads) -> None:
    publisher, stub, service = ads
    call = Stream(stub)
    node = discovery_pb2.DiscoveryRequest(type_url=LISTENER, resource_names=["clf"])
    node.node.id = "client-1"
    await call.write(node)
    first = await call.next()
    assert first.type_url == LISTENER and len(first.resources) == 1 and first.nonce
    await call.write(discovery_pb2.DiscoveryRequest(
        type_url=LISTENER, resource_names=["clf"], version_info=first.version_info,
        response_nonce=first.nonce))  # ACK: nothing more to send
    await call.quiet()
    await call.write(discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS,
                                                    resource_names=["clf/Model"]))
    endpoints = await call.next()
    # A NACK is kept for status and not answered with the same resources again.
    await call.write(discovery_pb2.DiscoveryRequest(
        type_url=ENDPOINTS, resource_names=["clf/Model"], response_nonce=endpoints.nonce,
        error_detail=status_pb2.Status(code=3, message="bad endpoint")))
    await call.quiet()
    (client,) = service.clients.values()
    assert client.node_id == "client-1"
    assert client.subscriptions[ENDPOINTS].nack == "bad endpoint"
    assert client.subscriptions[LISTENER].acked_version == first.version_info
    # CSDS: what the client was sent, ACKed or NACKed.
    status = await ClientStatus(service).FetchClientStatus(csds_pb2.ClientStatusRequest(),
                                                           None)
    (config,) = status.config
    assert config.node.id == "client-1"
    states = {(c.type_url.rpartition(".")[2], c.name): c.client_status
              for c in config.generic_xds_configs}
    assert states == {("Listener", "clf"): dump.ACKED,
                      ("ClusterLoadAssignment", "clf/Model"): dump.NACKED}
    # A change is sent (only the type that changed), with a new version.
    publisher.publish(replicas_key("clf", "Model"),
                      replicas=_replicas("127.0.0.1:5001", "127.0.0.1:5002"))
    changed = await call.next()
    assert changed.type_url == ENDPOINTS and changed.version_info != endpoints.version_info
    await call.quiet()
    # The same state on a new publisher (a new leader) gives the same version.
    again = Publisher()
    again.publish(ROUTES_KEY, routes=_routes())
    again.publish(replicas_key("clf", "Model"),
                  replicas=_replicas("127.0.0.1:5002", "127.0.0.1:5001"))
    call.close()
    service._publisher = lambda: again
    second = Stream(stub)
    await second.write(discovery_pb2.DiscoveryRequest(type_url=ENDPOINTS,
                                                      resource_names=["clf/Model"]))
    assert (await second.next()).version_info == changed.version_info
    second.close()


def test_envoy_http_resources_round_trip_and_keep_servefleet_routing() -> None:
    table = watch_pb2.RouteTable(request_timeout_s=2.5, routes=[
        watch_pb2.Route(route_prefix="/", application="site", deployment="Web"),
        watch_pb2.Route(route_prefix="/api", application="api", deployment="Front",
                        split=[apb.WeightedDeployment(deployment="Front", weight=90),
                               apb.WeightedDeployment(deployment="Canary", weight=10)],
                        shadow=apb.ShadowTarget(deployment="Shadow", fraction=0.25)),
        watch_pb2.Route(route_prefix="/secret", application="sec", deployment="S",
                        require_token=True)])
    sets = {("site", "Web"): watch_pb2.ReplicaSet(endpoints=[
        watch_pb2.ReplicaEndpoint(replica_id="w", http_address="127.0.0.1:7001")])}
    built = build(table, sets)
    for by_name in built.by_type.values():  # every resource survives the xds-protos types
        for resource in by_name.values():
            parsed = json_format.Parse(json_format.MessageToJson(resource.packed),
                                       any_pb2.Any())
            assert parsed == resource.packed
    config = _unpack(built.by_type[ROUTE]["servefleet-http"], route_pb2.RouteConfiguration)
    routes = config.virtual_hosts[0].routes
    # Longest prefix first; "/api" matches itself and "/api/...", never "/apix".
    assert [(r.match.path, r.match.prefix) for r in routes] == [
        ("/api", ""), ("", "/api/"), ("", "/")]
    api = routes[0].route
    assert [(c.name, c.weight.value) for c in api.weighted_clusters.clusters] == [
        ("servefleet-http/api/Front", 9000), ("servefleet-http/api/Canary", 1000)]
    assert api.request_mirror_policies[0].cluster == "servefleet-http/api/Shadow"
    assert api.request_mirror_policies[0].runtime_fraction.default_value.numerator == 250_000
    assert api.timeout.seconds == 2 and api.timeout.nanos == 500_000_000
    assert api.retry_policy.retriable_headers[0].name == "x-servefleet-rejected"
    assert routes[0].request_headers_to_add[0].header.value == "/api"
    assert "x-servefleet-caller" in config.request_headers_to_remove
    # A route that wants a token is not handed to an Envoy, which cannot check it.
    assert not any(r.name.startswith("sec") for r in routes)
    assert built.wildcard[CLUSTER] == {"servefleet-http/site/Web", "servefleet-http/api/Front",
                                       "servefleet-http/api/Canary",
                                       "servefleet-http/api/Shadow"}
    web = _unpack(built.by_type[ENDPOINTS]["servefleet-http/site/Web"],
                  endpoint_pb2.ClusterLoadAssignment)
    assert web.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value == 7001
    assert built.wildcard[LISTENER] == set()  # Envoy's listener is its own (docs/xds.md)


def test_an_application_that_cannot_serve_is_a_direct_503_for_envoy_and_absent_for_grpc(
        ) -> None:
    why = "application web is DEPLOY_FAILED: its build failed: ImportError: numpy"
    table = watch_pb2.RouteTable(
        routes=[watch_pb2.Route(route_prefix="/web", application="web", unavailable=why)],
        grpc_routes=[watch_pb2.GrpcRoute(application="web", unavailable=why)])
    built = build(table, {})
    config = _unpack(built.by_type[ROUTE]["servefleet-http"], route_pb2.RouteConfiguration)
    routes = config.virtual_hosts[0].routes
    assert [(r.match.path, r.match.prefix) for r in routes] == [("/web", ""), ("", "/web/")]
    for route in routes:
        assert route.direct_response.status == 503
        assert route.direct_response.body.inline_string == why + "\n"
    assert built.wildcard[CLUSTER] == set() and "web" not in built.by_type[LISTENER]
