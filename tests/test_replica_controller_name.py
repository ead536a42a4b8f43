"""A replica on Kubernetes reaches the controllers at their Pod IPs, which
no certificate made at install can name: the Kubernetes runtime's settings
tell it the name to expect instead (controller.servefleet, which certs
init's controller certificate carries), and its calls to the controllers
check that name. A real TLS handshake with a gRPC server at 127.0.0.2,
an address the certificates do not name."""

from __future__ import annotations

import json

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from servefleet._private.security import tls as tls_module
from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import Credentials, TlsFiles, add_port
from servefleet._private.testing import free_port
from servefleet.controller.runtime.kubernetes_pods import secret_files
from servefleet.replica.main import take_credentials
from servefleet.replica.replica import ReplicaSettings


def _settings(certs, server_name: str) -> ReplicaSettings:
    replica = TlsFiles.from_dir(certs, "replica")
    return ReplicaSettings(cluster="c", application="a", deployment="d", replica_id="r1",
                           version="v1", host="127.0.0.1", control_port=0, http_port=0,
                           import_path="x:y", tls=replica.as_dict(),
                           controller_server_name=server_name)


async def _check(address: str) -> int:
    """The health check over the credentials the replica took."""
    async with Credentials.from_env().aio_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5)
        return reply.status


async def test_the_replica_checks_the_name_its_settings_give(tmp_path, monkeypatch) -> None:
    init_certs(tmp_path)  # names localhost, 127.0.0.1 and controller.servefleet, not 127.0.0.2
    monkeypatch.setattr(tls_module, "_process_credentials", None)  # take_credentials sets it
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = free_port()
    add_port(server, f"127.0.0.2:{port}", TlsFiles.from_dir(tmp_path, "controller"))
    await server.start()
    try:
        take_credentials(_settings(tmp_path, "controller.servefleet"))
        assert await _check(f"127.0.0.2:{port}") == health_pb2.HealthCheckResponse.SERVING
        take_credentials(_settings(tmp_path, ""))  # the address, which the certificate lacks
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await _check(f"127.0.0.2:{port}")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(None)


def test_the_kubernetes_runtime_gives_the_name_with_tls(tmp_path) -> None:
    init_certs(tmp_path)
    files = secret_files({"token": "t"}, TlsFiles.from_dir(tmp_path, "replica"))
    assert json.loads(files["settings.json"])["controller_server_name"] == (
        "controller.servefleet")
    assert "controller_server_name" not in json.loads(
        secret_files({"token": "t"}, None)["settings.json"])
