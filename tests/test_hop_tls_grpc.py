"""TLS on the hop to replicas' gRPC ports (the controller's --replica-tls, as
for their HTTP ports): through the proxy's gRPC ingress and proxyless over
xDS (gRFC A29: the cluster names the bootstrap's certificate provider), real
processes from one `servefleet certs init` directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import grpc_stream_calls as calls  # (puts tests/apps on the path)
import pytest
from grpc_streams import streams_pb2_grpc as pb_grpc

from servefleet._private.security.certs import init_certs
from servefleet._private.security.hop_tls import REPLICA_SERVER_NAME
from servefleet._private.security.tls import TlsFiles
from servefleet._private.testing import (
    ControllerProcess,
    ProxyProcess,
    free_port,
    stop_cluster,
    wait_for,
)
from servefleet._private.xds_bootstrap import render
from servefleet.client import ControllerClient
from servefleet.v1 import replica_pb2, status_pb2

pytestmark = pytest.mark.slow
APP = (("application", "streams"),)
HERE = Path(__file__).parent
# A proxyless client in a process of its own (gRPC reads its bootstrap once
# per process): echoes through xds:///streams with the credentials named.
PROXYLESS = """
import json, sys
import grpc, grpc.experimental
import grpc_stream_calls as calls
from grpc_streams import streams_pb2_grpc
xds = sys.argv[1] == "xds"
credentials = grpc.xds_channel_credentials(grpc.experimental.insecure_channel_credentials())
with (grpc.secure_channel("xds:///streams", credentials) if xds
      else grpc.insecure_channel("xds:///streams")) as channel:
    stub = streams_pb2_grpc.StreamsStub(channel)
    try:
        print(json.dumps(calls.echo(stub, (), n=50, timeout=10)))
    except grpc.RpcError as e:
        print(json.dumps(e.code().name))
"""


@pytest.fixture(scope="module")
def hop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    certs = tmp_path_factory.mktemp("certs")
    init_certs(certs)
    logs = tmp_path_factory.mktemp("logs")
    marks = tmp_path_factory.mktemp("marks")
    controller = ControllerProcess(f"sqlite://{logs}/state.db", certs=certs, log_dir=logs,
                                   extra_args=["--replica-tls", "on"]).start()
    client = ControllerClient([controller.address], timeout=30,
                              credentials=controller.credentials)
    target = f"127.0.0.1:{free_port()}"
    proxy = ProxyProcess([controller.address], log_dir=logs,
                         extra_args=["--certs", str(certs), "--grpc-listen", target]).start()
    try:
        client.deploy_applications([calls.streams_application(marks, replicas=2)])

        def running() -> bool:
            info = client.application_status("streams")
            return info is not None and info.status == status_pb2.APPLICATION_STATUS_RUNNING
        wait_for(running, 120, "streams RUNNING")
        yield {"client": client, "certs": certs, "target": target,
               "controller": controller.address}
    finally:
        stop_cluster(controller, client, [proxy])


def _echo(channel: grpc.Channel, metadata=APP) -> list[int] | str:
    try:
        return calls.echo(pb_grpc.StreamsStub(channel), metadata, n=50, timeout=10)
    except grpc.RpcError as e:
        return e.code().name


def test_the_proxy_reaches_tls_replicas_and_they_refuse_callers_without_a_certificate(
        hop: dict, tmp_path: Path) -> None:
    replicas = [r for r in hop["client"].replicas("streams", "Streams")
                if r.state == replica_pb2.REPLICA_STATE_RUNNING]
    assert len(replicas) == 2 and all(r.record.http_tls for r in replicas)
    with grpc.insecure_channel(hop["target"]) as channel:  # the proxy: TLS behind it
        wait_for(lambda: _echo(channel) == list(range(50)), 30, "echoes through the proxy")
        for _ in range(4):
            assert _echo(channel) == list(range(50))

    other = tmp_path / "other"
    init_certs(other)
    name = (("grpc.ssl_target_name_override", REPLICA_SERVER_NAME),)
    for replica in replicas:
        address = replica.record.grpc_address
        with grpc.insecure_channel(address) as plain:
            assert _echo(plain, ()) == "UNAVAILABLE"
        for directory, role, expected in ((other, "admin", "UNAVAILABLE"),
                                          (hop["certs"], "admin", list(range(50)))):
            credentials = TlsFiles.from_dir(directory, role).channel_credentials()
            with grpc.secure_channel(address, credentials, options=name) as channel:
                assert _echo(channel, ()) == expected, (address, directory)


def test_proxyless_clients_reach_tls_replicas_with_xds_credentials(hop: dict) -> None:
    certs = hop["certs"]
    bootstrap = render([hop["controller"]], ca=str(certs / "ca.crt"),
                       cert=str(certs / "proxy.crt"), key=str(certs / "proxy.key"))
    assert json.loads(bootstrap)["certificate_providers"]
    env = {**os.environ, "GRPC_XDS_BOOTSTRAP_CONFIG": bootstrap,
           "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE / "apps"),
                                          os.environ.get("PYTHONPATH", "")])}

    def proxyless(how: str) -> object:
        done = subprocess.run([sys.executable, "-c", PROXYLESS, how], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    assert proxyless("xds") == list(range(50))
    # A channel without xDS credentials ignores the cluster's TLS: refused.
    assert proxyless("plain") == "UNAVAILABLE"
