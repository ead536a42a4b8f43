"""xDS resources for an Envoy in front of the HTTP side (pure).

An Envoy whose bootstrap has a listener with an HttpConnectionManager that
takes the route configuration `servefleet-http` over ADS, and CDS over ADS
(docs/xds.md has the bootstrap), gets:

- RDS `servefleet-http`: one virtual host; per route prefix, longest first,
  servefleet's matching (`/api` matches `/api` and `/api/...`, not
  `/apix`): the ingress deployment's cluster or the split's
  `weighted_clusters`, a shadow as a request mirror policy, the cluster's
  request timeout, `x-servefleet-route-prefix` set as the proxy sets it,
  and a retry on another replica when the answer carries
  `x-servefleet-rejected` (the replica never processed the request).
  Routes of applications with `require_token` are left out: Envoy cannot
  check servefleet's tokens, and such a route must not be reachable without;
  the route of an application that cannot serve (its build failed) is a
  direct 503 response with the reason; a client's `x-servefleet-hop` is
  removed, and in a cluster with credentials the configuration sent to one
  xDS client carries that client's own hop pass (hop_header.py);
- CDS (to wildcard subscribers): a cluster per routed deployment,
  `servefleet-http/<application>/<deployment>`, EDS, least request;
- EDS: the RUNNING replicas' HTTP addresses.
"""

from __future__ import annotations

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.route.v3 import route_components_pb2 as rc
from envoy.config.route.v3 import route_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import duration_pb2, wrappers_pb2

from servefleet._private.security.hop import HOP_HEADER
from servefleet._private.wire import REJECTED_HEADER, ROUTE_PREFIX_HEADER
from servefleet.v1 import watch_pb2

from .resources import ADS, CLUSTER, ENDPOINTS, ROUTE, Resources, endpoints

ROUTE_NAME = "servefleet-http"
_PREFIX = "servefleet-http/"


def http_cluster(application: str, deployment: str) -> str:
    return f"{_PREFIX}{application}/{deployment}"


def _action(route: watch_pb2.Route, timeout_s: float) -> rc.RouteAction:
    action = rc.RouteAction()
    split = [(t.deployment, t.weight) for t in route.split if t.weight > 0]
    if split:
        total = sum(w for _, w in split)
        for deployment, weight in split:
            action.weighted_clusters.clusters.add(
                name=http_cluster(route.application, deployment),
                weight=wrappers_pb2.UInt32Value(value=max(1, round(weight / total * 10_000))))
    else:
        action.cluster = http_cluster(route.application, route.deployment)
    if route.HasField("shadow") and route.shadow.fraction > 0:
        action.request_mirror_policies.add(
            cluster=http_cluster(route.application, route.shadow.deployment),
            runtime_fraction=base_pb2.RuntimeFractionalPercent(
                default_value=percent_pb2.FractionalPercent(
                    numerator=round(route.shadow.fraction * 1_000_000),
                    denominator=percent_pb2.FractionalPercent.MILLION)))
    action.timeout.CopyFrom(duration_pb2.Duration(seconds=int(timeout_s),
                                                  nanos=int(timeout_s % 1 * 1e9)))
    action.retry_policy.CopyFrom(rc.RetryPolicy(
        retry_on="retriable-headers", num_retries=wrappers_pb2.UInt32Value(value=2),
        retriable_headers=[rc.HeaderMatcher(name=REJECTED_HEADER.decode(),
                                            present_match=True)]))
    return action


def _matches(prefix: str) -> list[rc.RouteMatch]:
    if prefix == "/":
        return [rc.RouteMatch(prefix="/")]
    return [rc.RouteMatch(path=prefix), rc.RouteMatch(prefix=prefix + "/")]


def http_resources(out: Resources, routes: watch_pb2.RouteTable,
                   replica_sets: dict[tuple[str, str], watch_pb2.ReplicaSet]) -> None:
    """Add an Envoy's HTTP-side resources to `out`."""
    host = rc.VirtualHost(name=ROUTE_NAME, domains=["*"])
    clusters: dict[str, tuple[str, str]] = {}
    for route in sorted(routes.routes, key=lambda r: len(r.route_prefix), reverse=True):
        if route.require_token:
            continue
        if route.unavailable:  # the application cannot serve: say so at once
            refusal = rc.DirectResponseAction(status=503, body=base_pb2.DataSource(
                inline_string=route.unavailable + "\n"))
            for match in _matches(route.route_prefix):
                host.routes.add(match=match, direct_response=refusal,
                                name=f"{route.application}{match.path or match.prefix}")
            continue
        action = _action(route, routes.request_timeout_s)
        header = base_pb2.HeaderValueOption(
            header=base_pb2.HeaderValue(key=ROUTE_PREFIX_HEADER.decode(),
                                        value=route.route_prefix),
            append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)
        for match in _matches(route.route_prefix):
            host.routes.add(match=match, route=action, request_headers_to_add=[header],
                            name=f"{route.application}{match.path or match.prefix}")
        targets = [t.deployment for t in route.split if t.weight > 0] or [route.deployment]
        if route.HasField("shadow") and route.shadow.fraction > 0:
            targets.append(route.shadow.deployment)
        for deployment in targets:
            clusters[http_cluster(route.application, deployment)] = (route.application,
                                                                     deployment)
    # servefleet's own headers come only from servefleet, never from a client:
    # the hop pass (hop_header.py adds this client's own) included.
    out.add(ROUTE, ROUTE_NAME, route_pb2.RouteConfiguration(
        name=ROUTE_NAME, virtual_hosts=[host],
        request_headers_to_remove=["x-servefleet-method", "x-servefleet-caller", HOP_HEADER]))
    for name, key in sorted(clusters.items()):
        out.add(CLUSTER, name, cluster_pb2.Cluster(
            name=name, type=cluster_pb2.Cluster.EDS,
            lb_policy=cluster_pb2.Cluster.LEAST_REQUEST,
            eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=ADS,
                                                                    service_name=name)))
        out.wildcard[CLUSTER].add(name)
        replicas = replica_sets.get(key)
        out.add(ENDPOINTS, name, endpoints(
            name, (e.http_address for e in replicas.endpoints) if replicas is not None else ()),
            source=key)
