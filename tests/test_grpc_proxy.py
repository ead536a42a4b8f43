"""The proxy's gRPC side without a cluster: routing calls to applications
(pure), and the ingress port itself (TLS, health, its own services)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from servefleet._private.dataplane.grpc_forward import GrpcChannels
from servefleet._private.security.certs import init_certs
from servefleet._private.testing import free_port
from servefleet.proxy.grpc_ingress import GrpcProxy, start_grpc_ingress
from servefleet.proxy.routes import GrpcShape, GrpcTarget, NoGrpcRoute, RouteTable
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import ingress_pb2, ingress_pb2_grpc, watch_pb2

A = GrpcTarget("a", "Model", frozenset({"pkg.Classifier"}),
               streaming=frozenset({"/pkg.Classifier/Stream", "/pkg.Classifier/Upload"}),
               client_streaming=frozenset({"/pkg.Classifier/Upload"}))
B = GrpcTarget("b", "Other", frozenset({"pkg.Other", "pkg.Shared"}))
C = GrpcTarget("c", "Third", frozenset({"pkg.Shared"}))


def test_routing_by_application_then_by_service() -> None:
    table = RouteTable(grpc=[A, B, C])
    assert table.grpc_target("b", "pkg.Anything") == B  # the metadata key decides
    assert table.grpc_target("", "pkg.Classifier") == A  # the one serving the service
    with pytest.raises(NoGrpcRoute, match="application 'nope' serves no gRPC here; "
                                          "applications with gRPC: a, b, c"):
        table.grpc_target("nope", "pkg.Classifier")
    with pytest.raises(NoGrpcRoute, match=r"served by several applications \(b, c\)"):
        table.grpc_target("", "pkg.Shared")
    with pytest.raises(NoGrpcRoute, match=r"no application serves pkg\.Unknown"):
        table.grpc_target("", "pkg.Unknown")
    # One application with gRPC whose services are unknown (deployed without a build).
    lone = GrpcTarget("solo", "Model")
    assert RouteTable(grpc=[lone]).grpc_target("", "pkg.Unknown") == lone
    with pytest.raises(NoGrpcRoute, match="none"):
        RouteTable().grpc_target("", "pkg.Classifier")


def test_how_each_call_is_forwarded() -> None:
    table = RouteTable(grpc=[A, B])
    assert table.grpc_shape("/pkg.Classifier/Predict") == GrpcShape.UNARY
    assert table.grpc_shape("/pkg.Classifier/Stream") == GrpcShape.RESPONSES
    assert table.grpc_shape("/pkg.Classifier/Upload") == GrpcShape.REQUESTS
    # Unknown shape: one request, any number of answers (unary answers fit).
    assert table.grpc_shape("/pkg.Unknown/Predict") == GrpcShape.RESPONSES


async def test_the_ingress_port_serves_tls_health_and_its_own_services(tmp_path) -> None:
    init_certs(tmp_path)
    routes = RouteTable(grpc=[A])
    proxy = GrpcProxy(lambda app, name: None, lambda: routes, GrpcChannels())
    listen = f"127.0.0.1:{free_port()}"
    server, checks = await start_grpc_ingress(proxy, lambda: routes, listen,
                                              str(tmp_path / "proxy.crt"),
                                              str(tmp_path / "proxy.key"))
    try:
        credentials = grpc.ssl_channel_credentials((tmp_path / "ca.crt").read_bytes())
        async with grpc.aio.secure_channel(listen, credentials, options=[
                ("grpc.ssl_target_name_override", "localhost")]) as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            listed = await ingress_pb2_grpc.IngressServiceStub(channel).ListApplications(
                ingress_pb2.IngressServiceListApplicationsRequest(), timeout=5)
            assert [(a.name, list(a.services)) for a in listed.applications] == [
                ("a", ["pkg.Classifier"])]
            # Routed, but no replica set known yet: UNAVAILABLE, which clients may retry.
            call: Any = channel.unary_unary("/pkg.Classifier/Predict")
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call(b"", metadata=(("application", "a"),), timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "a/Model has no replicas known yet" in (raised.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await call(b"", metadata=(("application", "zz"),), timeout=5)
            assert raised.value.code() == grpc.StatusCode.NOT_FOUND
        # Plain text is refused on a TLS port.
        async with grpc.aio.insecure_channel(listen) as plain:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(),
                                                              timeout=3)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        await checks.enter_graceful_shutdown()
        proxy.draining = True
        async with grpc.aio.secure_channel(listen, credentials, options=[
                ("grpc.ssl_target_name_override", "localhost")]) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await ingress_pb2_grpc.IngressServiceStub(channel).Healthz(
                    ingress_pb2.HealthzRequest(), timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)


def test_a_traffic_split_picks_the_deployment_by_weight() -> None:
    table = watch_pb2.RouteTable(grpc_routes=[watch_pb2.GrpcRoute(
        application="a", deployment="Model", services=["pkg.S"],
        split=[apb.WeightedDeployment(deployment="Model", weight=80),
               apb.WeightedDeployment(deployment="Canary", weight=20),
               apb.WeightedDeployment(deployment="Off", weight=0)])])
    target = RouteTable.from_snapshot(table).grpc_target("a", "pkg.S")
    rng = random.Random(7)
    picks = Counter(target.pick(rng) for _ in range(10_000))
    assert set(picks) == {"Model", "Canary"} and 1_800 < picks["Canary"] < 2_200
