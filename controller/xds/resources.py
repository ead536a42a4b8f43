"""xDS resources from the Watch snapshots (pure): one source of routing truth.

For proxyless gRPC clients (gRFC A27), per application whose ingress serves
gRPC (the route table's `grpc_routes`):

- LDS: a Listener named after the application (the client's target is
  `xds:///<application>`) whose api_listener is an HttpConnectionManager
  taking its routes over RDS, with the router filter;
- RDS: a RouteConfiguration of the same name: every call to the ingress
  deployment's cluster, or, with a traffic split, `weighted_clusters` by the
  split's weights; RESOURCE_EXHAUSTED (a replica's "never processed"
  refusal) is retried up to 3 times (gRFC A44);
- CDS: a Cluster per deployment (`<application>/<deployment>`), EDS, round
  robin; when its replicas serve TLS (`ReplicaEndpoint.http_tls`), mutual
  TLS (gRFC A29): the client's certificate and the CA from the bootstrap's
  certificate provider `servefleet` (xds_bootstrap.py), the replica's
  certificate naming `replica.servefleet`;
- EDS: its ClusterLoadAssignment: the gRPC addresses of its RUNNING replicas
  (the replica-set snapshot: a replica leaves it before it drains), HEALTHY,
  in one locality of weight 1 (gRPC ignores localities without a weight).

envoy_http.py adds an Envoy's HTTP-side resources; build.py puts both together.

Each resource's version is the digest of its bytes, so every leader builds
the same versions from the same state.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import address_pb2, base_pb2, config_source_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.listener.v3 import api_listener_pb2, listener_pb2
from envoy.config.route.v3 import route_components_pb2, route_pb2
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import common_pb2, tls_pb2
from envoy.type.matcher.v3 import string_pb2
from google.protobuf import any_pb2, wrappers_pb2

from servefleet._private.security.hop_tls import REPLICA_SERVER_NAME
from servefleet._private.xds_bootstrap import CERTIFICATE_PROVIDER
from servefleet.v1 import watch_pb2

LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINTS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
TYPES = (LISTENER, ROUTE, CLUSTER, ENDPOINTS)
ADS = config_source_pb2.ConfigSource(ads=config_source_pb2.AggregatedConfigSource(),
                                      resource_api_version=config_source_pb2.V3)


@dataclass(frozen=True)
class Resource:
    name: str
    packed: any_pb2.Any
    version: str


@dataclass
class Resources:
    """Every resource by type URL and name, and the names a wildcard
    subscriber gets (an Envoy's CDS: the HTTP side; a proxyless gRPC client
    always names what it wants)."""

    by_type: dict[str, dict[str, Resource]] = field(
        default_factory=lambda: {t: {} for t in TYPES})
    wildcard: dict[str, set[str]] = field(default_factory=lambda: {t: set() for t in TYPES})
    # An EDS resource's deployment (application, deployment): whose replica set it holds.
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)
    # Each deployment's replica-set snapshot id these were built from (set by the caller).
    snapshot_ids: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, type_url: str, name: str, message: object,
            source: tuple[str, str] | None = None) -> None:
        packed = any_pb2.Any()
        packed.Pack(message)  # type: ignore[arg-type]
        self.by_type[type_url][name] = Resource(name, packed, digest(packed))
        if source is not None:
            self.sources[name] = source

    def endpoints_version(self, name: str) -> str | None:
        """The version of the EDS resource `name`, None when there is none."""
        resource = self.by_type[ENDPOINTS].get(name)
        return resource.version if resource is not None else None


def digest(packed: any_pb2.Any) -> str:
    """A resource's version: the digest of its bytes."""
    return hashlib.sha256(packed.value).hexdigest()[:16]


def response_version(resources: Resources | dict[str, Resource], type_url: str,
                     names: list[str]) -> str:
    """The version of a response carrying `names` (sorted) of `type_url` (from
    `resources`, or the resources of that type by name): a digest of their
    versions, the same on every leader for the same state."""
    by_name = resources.by_type[type_url] if isinstance(resources, Resources) else resources
    out = hashlib.sha256()
    for name in names:
        out.update(f"{name}={by_name[name].version};".encode())
    return out.hexdigest()[:16]


def cluster_name(application: str, deployment: str) -> str:
    return f"{application}/{deployment}"


def _listener(application: str) -> listener_pb2.Listener:
    router = any_pb2.Any()
    router.Pack(router_pb2.Router())
    manager = hcm_pb2.HttpConnectionManager(
        rds=hcm_pb2.Rds(config_source=ADS, route_config_name=application),
        http_filters=[hcm_pb2.HttpFilter(name="envoy.filters.http.router",
                                         typed_config=router)])
    packed = any_pb2.Any()
    packed.Pack(manager)
    return listener_pb2.Listener(name=application,
                                 api_listener=api_listener_pb2.ApiListener(api_listener=packed))


def _routes(application: str, clusters: list[tuple[str, float]]) -> route_pb2.RouteConfiguration:
    action = route_components_pb2.RouteAction()
    if len(clusters) == 1:
        action.cluster = clusters[0][0]
    else:
        # Weights are relative in the split; xDS wants integers.
        total = sum(w for _, w in clusters)
        for name, weight in clusters:
            action.weighted_clusters.clusters.add(
                name=name, weight=wrappers_pb2.UInt32Value(
                    value=max(1, round(weight / total * 10_000))))
    # A replica refuses a call it will not process (full, loading, draining)
    # with RESOURCE_EXHAUSTED: retry those elsewhere, as the proxies do.
    action.retry_policy.CopyFrom(route_components_pb2.RetryPolicy(
        retry_on="resource-exhausted", num_retries=wrappers_pb2.UInt32Value(value=3)))
    host = route_components_pb2.VirtualHost(
        name=application, domains=["*"],
        routes=[route_components_pb2.Route(match=route_components_pb2.RouteMatch(prefix=""),
                                           route=action)])
    return route_pb2.RouteConfiguration(name=application, virtual_hosts=[host])


def _replica_tls() -> base_pb2.TransportSocket:
    """Mutual TLS to replicas, with the client's own files (gRPC's certificate
    provider of the bootstrap) and the replicas' identity to check."""
    provider = common_pb2.CertificateProviderPluginInstance(instance_name=CERTIFICATE_PROVIDER)
    context = tls_pb2.UpstreamTlsContext(common_tls_context=tls_pb2.CommonTlsContext(
        tls_certificate_provider_instance=provider,
        validation_context=common_pb2.CertificateValidationContext(
            ca_certificate_provider_instance=provider,
            match_subject_alt_names=[string_pb2.StringMatcher(exact=REPLICA_SERVER_NAME)])))
    packed = any_pb2.Any()
    packed.Pack(context)
    return base_pb2.TransportSocket(name="envoy.transport_sockets.tls", typed_config=packed)


def _cluster(name: str, tls: bool = False) -> cluster_pb2.Cluster:
    cluster = cluster_pb2.Cluster(
        name=name, type=cluster_pb2.Cluster.EDS, lb_policy=cluster_pb2.Cluster.ROUND_ROBIN,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ADS,
                                                                service_name=name))
    if tls:
        cluster.transport_socket.CopyFrom(_replica_tls())
    return cluster


def endpoints(name: str, addresses: Iterable[str]) -> endpoint_pb2.ClusterLoadAssignment:
    assignment = endpoint_pb2.ClusterLoadAssignment(cluster_name=name)
    found = sorted(addresses)
    if found:
        locality = assignment.endpoints.add(
            load_balancing_weight=wrappers_pb2.UInt32Value(value=1),
            locality=base_pb2.Locality())
        for address in found:
            host, _, port = address.rpartition(":")
            locality.lb_endpoints.add(
                health_status=health_check_pb2.HEALTHY,
                endpoint=endpoint_components_pb2.Endpoint(address=address_pb2.Address(
                    socket_address=address_pb2.SocketAddress(
                        address=host.strip("[]"), port_value=int(port)))))
    return assignment


def grpc_resources(out: Resources, routes: watch_pb2.RouteTable,
                   replica_sets: dict[tuple[str, str], watch_pb2.ReplicaSet]) -> None:
    """Add the proxyless gRPC clients' resources to `out`."""
    for route in routes.grpc_routes:
        app = route.application
        if app in out.by_type[LISTENER] or route.unavailable:
            # An application's first gRPC deployment is its ingress; one that
            # cannot serve (its build failed) has nothing to offer clients.
            continue
        targets = [(t.deployment, t.weight) for t in route.split if t.weight > 0] or [
            (route.deployment, 1.0)]
        out.add(LISTENER, app, _listener(app))
        out.add(ROUTE, app, _routes(app, [(cluster_name(app, d), w) for d, w in targets]))
        for deployment, _ in targets:
            name = cluster_name(app, deployment)
            replicas = replica_sets.get((app, deployment))
            tls = replicas is not None and any(e.http_tls for e in replicas.endpoints)
            out.add(CLUSTER, name, _cluster(name, tls))
            out.add(ENDPOINTS, name, endpoints(
                name, (e.grpc_address for e in replicas.endpoints if e.grpc_address)
                if replicas is not None else ()), source=(app, deployment))
