"""`StatePublisher`: the leader's state as Watch snapshots (watch.py holds
them). The route table from the live goals, and per deployment its RUNNING
replicas and its lightweight config. It is told which deployment changed and
republishes at once, so an update reaches watchers without waiting for a tick.
"""

from __future__ import annotations

from collections.abc import Callable

from servefleet._private.wire import (
    CONFIG_KIND,
    REPLICAS_KIND,
    ROUTES_KEY,
    config_key,
    parse_watch_key,
    replicas_key,
)
from servefleet.v1 import application_pb2, records_pb2, watch_pb2

from .goals.app_specs import route_of
from .reconcile.observed import ReplicaObservation
from .watch import Publisher


def _route_inputs(record: records_pb2.DeploymentRecord) -> tuple[object, ...]:
    """What the route table takes of a deployment (the rest comes from
    applications, whose changes republish it: refresh_routes)."""
    spec = record.spec
    return (spec.route_prefix if spec.HasField("route_prefix") else None,
            bool(spec.grpc_servicer_functions), tuple(spec.grpc_services),
            tuple(spec.grpc_streaming_methods), tuple(spec.grpc_client_streaming_methods))


class StatePublisher:
    """Keeps the Publisher in step with the leader's goals and replicas."""

    def __init__(self, publisher: Publisher,
                 goals: Callable[[], list[records_pb2.DeploymentRecord]],
                 running: Callable[[str, str], list[ReplicaObservation]],
                 application: Callable[[str], application_pb2.ApplicationSpec | None]
                 | None = None,
                 http_options: Callable[[], application_pb2.HttpOptions] | None = None,
                 unavailable: Callable[[records_pb2.DeploymentRecord], str] | None = None,
                 unbuilt: Callable[[], list[tuple[application_pb2.ApplicationSpec, str]]]
                 | None = None,
                 goal: Callable[[str, str], records_pb2.DeploymentRecord | None]
                 | None = None) -> None:
        self._publisher = publisher
        self._goals = goals
        # One live deployment, or None (default: a search of every deployment).
        self._goal = goal or (lambda app, name: next(
            (r for r in goals() if (r.spec.application, r.spec.name) == (app, name)), None))
        self._routed: dict[tuple[str, str], tuple[object, ...]] = {}  # _route_inputs
        self._running = running
        # An application's spec (traffic policy, require_token), for its route.
        self._application = application or (lambda name: None)
        self._http_options = http_options or application_pb2.HttpOptions
        # Why no replica of a deployment can come ("" if one can: unservable.py).
        self._unavailable = unavailable or (lambda record: "")
        # Applications that cannot serve at all, each with why (its build failed).
        self._unbuilt = unbuilt or list

    def refresh_all(self) -> None:
        live = self._goals()
        self._publish_routes(live)
        wanted = set()
        for record in live:
            wanted.add((record.spec.application, record.spec.name))
            self._publish_deployment(record)
        for key in self._publisher.keys():
            parsed = parse_watch_key(key)
            if (parsed.kind in (REPLICAS_KIND, CONFIG_KIND)
                    and (parsed.application, parsed.deployment) not in wanted):
                self._publisher.remove(key)

    def refresh_routes(self) -> None:
        """Republish the route table (a traffic policy or the HTTP options changed)."""
        self._publish_routes(self._goals())

    def refresh(self, application: str, name: str) -> None:
        """Republish one deployment after it changed, and the routes if what they
        take of it changed: not for a replica's coming or going, the most
        common change (building them reads every deployment: docs/scale.md)."""
        record = self._goal(application, name)
        routed = None if record is None else _route_inputs(record)
        if routed != self._routed.get((application, name)):
            self._publish_routes(self._goals())
        if record is None:
            self._publisher.remove(replicas_key(application, name))
            self._publisher.remove(config_key(application, name))
        else:
            self._publish_deployment(record)

    def _publish_routes(self, live: list[records_pb2.DeploymentRecord]) -> None:
        self._routed = {(r.spec.application, r.spec.name): _route_inputs(r) for r in live}
        routes = sorted((r.spec.route_prefix, r.spec.application, r.spec.name)
                        for r in live if r.spec.HasField("route_prefix"))
        options = self._http_options()
        table = watch_pb2.RouteTable(request_timeout_s=options.request_timeout_s,
                                     max_request_body_bytes=options.max_request_body_bytes)
        for prefix, app, name in routes:
            route = table.routes.add(route_prefix=prefix, application=app, deployment=name)
            spec = self._application(app)
            if spec is not None:
                route.split.extend(spec.traffic.split)
                if spec.traffic.HasField("shadow"):
                    route.shadow.CopyFrom(spec.traffic.shadow)
                route.require_token = spec.require_token
        served = {r.route_prefix for r in table.routes}
        for spec, why in self._unbuilt():  # answered at once, never queued
            unbuilt_prefix = route_of(spec)
            if unbuilt_prefix is not None and unbuilt_prefix not in served:
                table.routes.add(route_prefix=unbuilt_prefix, application=spec.name,
                                 unavailable=why, require_token=spec.require_token)
            if spec.grpc_servicer_functions:
                table.grpc_routes.add(application=spec.name, unavailable=why,
                                      require_token=spec.require_token)
        table.routes.sort(key=lambda r: r.route_prefix)
        for record in live:
            if record.spec.grpc_servicer_functions:
                owner = self._application(record.spec.application)
                table.grpc_routes.add(
                    application=record.spec.application, deployment=record.spec.name,
                    services=record.spec.grpc_services,
                    streaming_methods=record.spec.grpc_streaming_methods,
                    client_streaming_methods=record.spec.grpc_client_streaming_methods,
                    split=owner.traffic.split if owner is not None else (),
                    require_token=owner is not None and owner.require_token)
        self._publisher.publish(ROUTES_KEY, routes=table)

    def _publish_deployment(self, record: records_pb2.DeploymentRecord) -> None:
        app, name = record.spec.application, record.spec.name
        config = record.spec.replica_config
        endpoints = sorted((r.record.replica_id, r.record.http_address, r.record.grpc_address,
                            r.view.cleared, r.record.http_tls) for r in self._running(app, name))
        self._publisher.publish(replicas_key(app, name), replicas=watch_pb2.ReplicaSet(
            application=app, deployment=name,
            endpoints=[watch_pb2.ReplicaEndpoint(replica_id=i, http_address=a, grpc_address=g,
                                                 cleared=c, http_tls=t)
                       for i, a, g, c, t in endpoints],
            max_ongoing_requests=config.max_ongoing_requests,
            max_queued_requests=config.max_queued_requests,
            retry_methods=config.retry_methods,
            request_router=config.request_router,
            request_router_kwargs_json=config.request_router_kwargs_json,
            backpressure_status_code=config.backpressure.status_code,
            backpressure_retry_after_s=config.backpressure.retry_after_s
            if config.backpressure.HasField("retry_after_s") else None,
            unavailable="" if endpoints else self._unavailable(record)))
        self._publisher.publish(config_key(app, name), config=watch_pb2.DeploymentConfig(
            user_config_json=config.user_config_json,
            max_ongoing_requests=config.max_ongoing_requests,
            version=record.version, code_hash=record.code_hash))
