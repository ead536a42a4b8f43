"""Mutual TLS end to end: etcd with client-certificate auth, two controllers,
a proxy and replicas, all from one `servefleet certs init` directory."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from loadgen import answers

from servefleet._private.external_servers import EtcdServer
from servefleet._private.security.certs import init_certs, role_server_name
from servefleet._private.security.tls import PLAIN, Credentials, TlsFiles
from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
from servefleet.client import ControllerClient, ControllerUnreachable
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, replica_pb2_grpc, status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    subprocess.run([sys.executable, "-m", "servefleet", "certs", "init", str(directory)],
                   check=True, capture_output=True)
    return directory


@pytest.fixture(scope="module")
def secure(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    etcd = EtcdServer(certs=certs).start()
    logs = tmp_path_factory.mktemp("logs")
    controllers = [ControllerProcess(etcd.url, cluster="tls", lease_ttl=2, log_dir=logs,
                                     certs=certs).start() for _ in range(2)]
    admin = ControllerClient([c.address for c in controllers], timeout=30,
                             credentials=Credentials(TlsFiles.from_dir(certs, "admin")))
    proxy = ProxyProcess([c.address for c in controllers], log_dir=logs,
                         extra_args=["--certs", str(certs)])
    try:
        admin.deploy(d.DeploymentSpec(
            name="Hello", import_path="echo_app:hello", route_prefix="/hello",
            runtime=d.RuntimeOptions(working_dir=APPS),
            replica_config=d.ReplicaConfig(num_replicas=2, graceful_shutdown_timeout_s=2,
                                           graceful_shutdown_wait_loop_s=0.1)))
        proxy.start()
        yield {"etcd": etcd, "controllers": controllers, "admin": admin, "proxy": proxy}
    finally:
        proxy.stop()
        with contextlib.suppress(Exception):
            admin.shutdown()  # stops the replicas too
        admin.close()
        for c in controllers:
            c.stop()
        etcd.stop()


def healthy(client: ControllerClient) -> bool:
    deps = [dep for app in client.status().applications for dep in app.deployments]
    return len(deps) == 1 and deps[0].status == status_pb2.DEPLOYMENT_STATUS_HEALTHY


def test_a_cluster_on_mutual_tls_serves_end_to_end(secure: dict) -> None:
    admin, proxy = secure["admin"], secure["proxy"]
    wait_for(lambda: healthy(admin), 60, "Hello healthy over TLS")
    wait_for(lambda: answers(proxy.url + "/hello?name=tls"), 30, "the proxy routes /hello")
    assert httpx.get(proxy.url + "/hello", params={"name": "tls"}).text == "hello tls"
    # The proxy reached the leader's Watch stream with its own certificate.
    assert [p for p in admin.status().proxies if p.healthy]


def test_plain_text_and_foreign_certificates_are_refused(secure: dict, certs: Path,
                                                          tmp_path: Path) -> None:
    addresses = [c.address for c in secure["controllers"]]
    with pytest.raises(ControllerUnreachable):
        with ControllerClient(addresses, timeout=1.5, credentials=PLAIN) as plain:
            plain.status()
    other = tmp_path / "other"
    init_certs(other)
    with pytest.raises(ControllerUnreachable, match=r"(?i)handshake|ssl|certificate|connect"):
        with ControllerClient(addresses, timeout=1.5, credentials=Credentials(
                TlsFiles.from_dir(other, "admin"))) as foreign:
            foreign.status()


def test_replicas_take_control_calls_only_from_controllers(secure: dict, certs: Path) -> None:
    admin = secure["admin"]
    wait_for(lambda: healthy(admin), 60, "Hello healthy over TLS")
    address = admin.replicas(deployment="Hello")[0].record.control_address
    as_controller = Credentials(TlsFiles.from_dir(certs, "controller"),
                                server_name=role_server_name("replica"))
    with as_controller.channel(address) as channel:
        reply = replica_pb2_grpc.ReplicaServiceStub(channel).GetMetadata(
            replica_pb2.GetMetadataRequest(), timeout=5)
        assert reply.replica_id
    as_proxy = Credentials(TlsFiles.from_dir(certs, "proxy"),
                           server_name=role_server_name("replica"))
    with as_proxy.channel(address) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            replica_pb2_grpc.ReplicaServiceStub(channel).GetMetadata(
                replica_pb2.GetMetadataRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "only controllers" in (refused.value.details() or "")
    with PLAIN.channel(address) as channel:
        with pytest.raises(grpc.RpcError) as plain:
            replica_pb2_grpc.ReplicaServiceStub(channel).GetMetadata(
                replica_pb2.GetMetadataRequest(), timeout=2)
    assert plain.value.code() in (grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.DEADLINE_EXCEEDED)


def test_the_standby_takes_over_on_tls(secure: dict) -> None:
    admin, proxy = secure["admin"], secure["proxy"]
    wait_for(lambda: healthy(admin), 60, "Hello healthy over TLS")
    leader = next(c for c in secure["controllers"] if c.is_leader())
    leader.kill()
    wait_for(lambda: any(c.is_leader() for c in secure["controllers"] if c is not leader),
             30, "the standby leads")
    wait_for(lambda: healthy(admin), 30, "Hello healthy under the new leader")
    assert httpx.get(proxy.url + "/hello", params={"name": "again"}).text == "hello again"


def test_etcd_opens_only_to_the_controllers_etcd_certificate(secure: dict, certs: Path) -> None:
    """etcd has a CA of its own: the replica's key, which user code holds, and
    every other certificate of the cluster's CA are refused."""
    import asyncio

    from servefleet.controller.store import StoreUnavailable, open_store

    url = secure["etcd"].url

    async def read(files: TlsFiles) -> int:
        store = open_store(url, files)
        try:
            return await store.revision()
        finally:
            await store.close()

    controller = TlsFiles(certs / "etcd-ca.crt", certs / "etcd-client.crt",
                          certs / "etcd-client.key")
    assert asyncio.run(read(controller)) > 0
    for role in ("replica", "admin", "controller"):
        with pytest.raises(StoreUnavailable):
            asyncio.run(read(TlsFiles(certs / "etcd-ca.crt", certs / f"{role}.crt",
                                      certs / f"{role}.key")))

