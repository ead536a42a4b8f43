"""TLS on the hop to replicas' HTTP ports (the controller's --replica-tls):
a controller, replicas and a proxy from one `servefleet certs init`
directory, real processes and real handshakes."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from servefleet._private.dataplane.upstream import NotDelivered, UpstreamPool
from servefleet._private.security.certs import init_certs
from servefleet._private.security.hop_tls import (
    client_context,
    replica_serves_tls,
    server_context,
)
from servefleet._private.security.tls import TlsFiles
from servefleet._private.testing import (
    ControllerProcess,
    ProxyProcess,
    free_port,
    stop_cluster,
    wait_for,
)
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import replica_pb2, status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
APPLICATIONS = {"graph": ("/graph", "graph_app:app"), "st": ("/st", "stream_app:build")}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    init_certs(directory)
    return directory


@pytest.fixture(scope="module")
def hop(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    logs = tmp_path_factory.mktemp("logs")
    controller = ControllerProcess(f"sqlite://{logs}/state.db", certs=certs, log_dir=logs,
                                   extra_args=["--replica-tls", "on"]).start()
    client = ControllerClient([controller.address], timeout=30,
                              credentials=controller.credentials)
    proxy = ProxyProcess([controller.address], log_dir=logs,
                         extra_args=["--certs", str(certs)])
    try:
        client.deploy_applications([apb.ApplicationSpec(
            name=name, route_prefix=prefix, import_path=path,
            runtime=dpb.RuntimeOptions(working_dir=APPS))
            for name, (prefix, path) in APPLICATIONS.items()])
        client.deploy(dpb.DeploymentSpec(name="Ws", import_path="ws_app:WsApp",
                                         route_prefix="/ws",
                                         runtime=dpb.RuntimeOptions(working_dir=APPS)))

        def running() -> bool:
            return all((info := client.application_status(name)) is not None
                       and info.status == status_pb2.APPLICATION_STATUS_RUNNING
                       for name in APPLICATIONS)
        wait_for(running, 120, "the applications RUNNING")
        proxy.start()
        wait_for(lambda: httpx.get(proxy.url + "/graph?x=1", timeout=5).status_code == 200,
                 30, "the proxy reaching /graph")
        yield {"client": client, "proxy": proxy, "certs": certs}
    finally:
        stop_cluster(controller, client, [proxy])


def test_requests_handles_streams_and_websockets_cross_the_tls_hop(hop: dict) -> None:
    client, proxy = hop["client"], hop["proxy"]
    replicas = [r for r in client.replicas() if r.state == replica_pb2.REPLICA_STATE_RUNNING]
    assert replicas and all(r.record.http_tls for r in replicas)
    # Proxy -> Front, then Front's handle -> Adder: both hops TLS.
    assert httpx.get(proxy.url + "/graph", params={"x": 1}, timeout=10).json() == {
        "label": "front", "call": 11, "method": 11}
    # A stream from Tokens through Front's handle and the proxy, as it goes.
    with httpx.stream("GET", proxy.url + "/st", params={"n": 4}, timeout=30) as reply:
        assert reply.status_code == 200
        assert [line for line in reply.iter_lines() if line] == ["t0", "t1", "t2", "t3"]
    # A WebSocket through the proxy: wss to the replica.
    with connect(proxy.url.replace("http", "ws") + "/ws/echo", open_timeout=10) as ws:
        ws.send("over tls")
        assert ws.recv(timeout=10) == "over tls"


def test_a_replica_refuses_callers_without_a_cluster_certificate(hop: dict,
                                                                tmp_path: Path) -> None:
    client, certs = hop["client"], hop["certs"]
    address = next(r.record.http_address for r in client.replicas("graph", "Front")
                   if r.state == replica_pb2.REPLICA_STATE_RUNNING)
    with pytest.raises(httpx.HTTPError):  # plain text to the TLS port
        httpx.get(f"http://{address}/?x=1", timeout=5)
    # TLS with the cluster's CA but no client certificate: the handshake fails.
    no_cert = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    no_cert.check_hostname = False
    with pytest.raises((httpx.HTTPError, ssl.SSLError)):
        httpx.get(f"https://{address}/?x=1", verify=no_cert, timeout=5).raise_for_status()
    # A certificate of another CA: refused too.
    other = tmp_path / "other"
    init_certs(other)
    foreign = client_context(TlsFiles.from_dir(other, "admin"))
    foreign.check_hostname = False
    foreign.verify_mode = ssl.CERT_NONE
    with pytest.raises((httpx.HTTPError, ssl.SSLError)):
        httpx.get(f"https://{address}/?x=1", verify=foreign, timeout=5).raise_for_status()
    # Any certificate of the cluster's CA is let in (an operator's script, say).
    admin = client_context(TlsFiles.from_dir(certs, "admin"))
    with httpx.Client(verify=admin) as caller:
        assert caller.get(f"https://{address}/?x=1", timeout=10).status_code == 200


async def test_a_server_without_the_replica_identity_is_refused(certs: Path) -> None:
    """A server with a certificate of the cluster's CA, but for another role
    (a proxy's), is no replica: the handshake fails and nothing is sent."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(1024))
        writer.close()

    port = free_port()
    server = await asyncio.start_server(serve, "127.0.0.1", port,
                                        ssl=server_context(TlsFiles.from_dir(certs, "proxy")))
    upstream = UpstreamPool(tls=client_context(TlsFiles.from_dir(certs, "proxy")))
    address = f"127.0.0.1:{port}"
    upstream.serves_tls(address, True)
    try:
        with pytest.raises(NotDelivered, match=r"TLS handshake failed: .*certificate"):
            await upstream.request(address, "GET", b"/", [], b"")
        # Without a certificate of its own, a caller says so instead of trying.
        bare = UpstreamPool()
        bare.serves_tls(address, True)
        with pytest.raises(NotDelivered, match="no cluster certificate"):
            await bare.request(address, "GET", b"/", [], b"")
    finally:
        server.close()
        await server.wait_closed()
    assert received == []


def test_the_default_keeps_loopback_replicas_plain(certs: Path) -> None:
    tls = TlsFiles.from_dir(certs, "replica")
    assert not replica_serves_tls("auto", tls, "127.0.0.1")
    assert not replica_serves_tls("auto", tls, "::1")
    assert replica_serves_tls("auto", tls, "10.0.0.5")
    assert replica_serves_tls("auto", tls, "0.0.0.0")
    assert replica_serves_tls("on", tls, "127.0.0.1")
    assert not replica_serves_tls("off", tls, "10.0.0.5")
    assert not replica_serves_tls("on", None, "10.0.0.5")  # no certificates: plain
