"""No unauthenticated caller reaches a replica (issue 52): a cluster with
tokens and no certificates, replicas on loopback, real processes. A pickle
POSTed straight to a replica's HTTP port used to run there; now a replica
serves only callers with a hop pass (a proxy, another replica, a driver
with credentials), and handle calls only from roles that may run code."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import grpc
import httpx
import pytest

from servefleet._private.handles import values
from servefleet._private.security import tokens
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
from servefleet._private.wire import METHOD_HEADER
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import replica_pb2, replica_pb2_grpc

APPS = str(Path(__file__).parent / "apps")
pytestmark = pytest.mark.slow


class Planted:
    """Unpickling this creates a file: proof that a body was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def handle_call(url: str, path: str, hop: str | None) -> httpx.Response:
    headers = {METHOD_HEADER.decode(): "__call__", "content-type": "application/octet-stream"}
    if hop is not None:
        headers["x-servefleet-hop"] = hop
    body = b"".join(bytes(part) for part in values.frame(((Planted(path),), {})))
    return httpx.post(url, content=body, headers=headers, timeout=30)


def test_replicas_serve_only_the_clusters_callers(tmp_path, cluster) -> None:
    token_file = tmp_path / "tokens"
    issued = {role: tokens.create(token_file, f"{role}-1", role)
              for role in ("admin", "proxy", "reader")}
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, extra_args=[
                                       "--auth-tokens", str(token_file),
                                       "--allow-working-dir", "/"]).start()
    proxy = None
    # Where the replica's user (nobody, --replica-user auto) may write.
    shared = Path(tempfile.mkdtemp(prefix="servefleet-hop-"))
    shared.chmod(0o777)
    planted = shared / "planted"
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=Credentials(token=issued["admin"])) as client:
            client.deploy_applications([apb.ApplicationSpec(
                name="calc", import_path="graph_app:app", route_prefix="/calc",
                runtime=d.RuntimeOptions(working_dir=APPS)), apb.ApplicationSpec(
                name="headers", import_path="headers_app:app", route_prefix="/headers",
                runtime=d.RuntimeOptions(working_dir=APPS))])
            os.environ["SERVEFLEET_TOKEN"] = issued["proxy"]  # the proxies', inherited
            try:
                proxy = ProxyProcess([controller.address], log_dir=tmp_path).start()
                engine = ProxyProcess([controller.address], log_dir=tmp_path,
                                      extra_args=["--engine", "haproxy"]).start()
            finally:
                del os.environ["SERVEFLEET_TOKEN"]
            # Through either proxy (its pass; HAProxy's in its configuration)
            # and Front's handle calls to Adder (Front's own pass): served.
            for front in (proxy, engine):
                wait_for(lambda: httpx.get(front.url + "/calc", params={"x": 2},  # noqa: B023
                                           timeout=30).status_code == 200, 90,
                         f"{front.url} serves")
                assert httpx.get(front.url + "/calc", params={"x": 2}).json()["call"] == 12
                # User code never sees the proxy's pass (an app that answers
                # with its request headers gave it to anyone who asked).
                shown = wait_for(lambda: httpx.get(front.url + "/headers",  # noqa: B023
                                                   timeout=30), 60, "the headers app")
                assert shown.status_code == 200 and "x-request-id" in shown.json()
                assert "x-servefleet-hop" not in shown.json(), shown.json()
            engine.stop()
            adder = next(r.record for r in client.replicas("calc", "Adder")
                         if r.state == replica_pb2.REPLICA_STATE_RUNNING)
            url = f"http://{adder.http_address}/"

            # Straight to a replica's port, loopback or not: refused before
            # the body is read, whatever it carries.
            for hop in (None, "", "sfh1.forged.pass"):
                refused = handle_call(url, str(planted), hop)
                assert refused.status_code == 401, refused.text
                assert "x-servefleet-hop" in refused.text
            assert httpx.get(url, timeout=10).status_code == 401
            assert not planted.exists(), "a body was unpickled for an unauthenticated caller"

            # A proxy's pass reaches HTTP, but not handle calls (code).
            proxy_pass = getattr(ControllerClient(
                [controller.address], credentials=Credentials(token=issued["proxy"])
            ).hop_pass(), "pass")
            assert httpx.get(url, headers={"x-servefleet-hop": proxy_pass},
                             timeout=10).status_code != 401
            refused = handle_call(url, str(planted), proxy_pass)
            assert refused.status_code == 401 and "may not make handle calls" in refused.text
            assert not planted.exists()

            # An admin's pass may: the body is unpickled (the file appears).
            admin_pass = getattr(client.hop_pass(), "pass")
            handle_call(url, str(planted), admin_pass)
            assert planted.exists()

            # The control port (no TLS here) takes only the leader's own pass:
            # the replicas are RUNNING, so its probes and checks got through.
            with grpc.insecure_channel(adder.control_address) as channel:
                stub = replica_pb2_grpc.ReplicaServiceStub(channel)
                for metadata in ((), (("x-servefleet-hop", admin_pass),)):
                    with pytest.raises(grpc.RpcError) as denied:
                        stub.Drain(replica_pb2.DrainRequest(), metadata=metadata, timeout=10)
                    assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert adder.replica_id in {r.record.replica_id for r in client.replicas("calc")}
            client.shutdown()
    finally:
        if proxy is not None:
            proxy.stop()
        controller.stop()
        shutil.rmtree(shared, ignore_errors=True)


def test_a_pickle_without_credentials_still_runs_where_the_cluster_has_none(served,
                                                                         tmp_path) -> None:
    """The local default (no tokens, no certificates) trusts whoever reaches
    its loopback ports, as before: the gate is for clusters with credentials."""
    client, _ = served
    client.deploy(d.DeploymentSpec(name="Echo", import_path="echo_app:Echo",
                                   runtime=d.RuntimeOptions(working_dir=APPS)))
    wait_for(lambda: any(r.state == replica_pb2.REPLICA_STATE_RUNNING
                         for r in client.replicas()), 60, "the replica")
    (echo,) = [r.record for r in client.replicas()]
    planted = tmp_path / "planted"
    handle_call(f"http://{echo.http_address}/", str(planted), None)
    assert planted.exists()


def test_websockets_and_grpc_need_a_pass_too(tmp_path, cluster) -> None:
    """The same cluster kind: a WebSocket and a gRPC call straight to a
    replica without a pass are refused; through the proxy (its pass) both
    work, and a gRPC call with a pass straight to the replica too."""
    import asyncio

    import grpc_stream_calls as calls
    from grpc_streams import streams_pb2_grpc
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    from servefleet._private.testing import free_port

    token_file = tmp_path / "tokens"
    admin = tokens.create(token_file, "admin-1", "admin")
    proxy_token = tokens.create(token_file, "proxy-1", "proxy")
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, extra_args=[
                                       "--auth-tokens", str(token_file),
                                       "--allow-working-dir", "/"]).start()
    target = f"127.0.0.1:{free_port()}"
    proxy = None
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=Credentials(token=admin)) as client:
            client.deploy_applications([calls.streams_application(tmp_path)])
            client.deploy(d.DeploymentSpec(name="Ws", import_path="ws_app:WsApp",
                                           route_prefix="/ws",
                                           runtime=d.RuntimeOptions(working_dir=APPS)))
            os.environ["SERVEFLEET_TOKEN"] = proxy_token
            try:
                proxy = ProxyProcess([controller.address], log_dir=tmp_path,
                                     extra_args=["--grpc-listen", target]).start()
            finally:
                del os.environ["SERVEFLEET_TOKEN"]
            wait_for(lambda: httpx.get(proxy.url + "/ws/", timeout=30).status_code == 200, 90,
                     "the WebSocket app through the proxy")
            ws = next(r.record for r in client.replicas(deployment="Ws"))
            streams = wait_for(lambda: next((r.record for r in client.replicas("streams")
                                             if r.state == replica_pb2.REPLICA_STATE_RUNNING),
                                            None), 90, "a Streams replica RUNNING")

            async def echo(url: str) -> str:
                async with connect(url, open_timeout=10) as socket:
                    await socket.send("hi")
                    return str(await socket.recv())
            assert asyncio.run(echo(proxy.url.replace("http", "ws") + "/ws/echo")) == "hi"
            with pytest.raises(InvalidStatus) as refused:
                asyncio.run(echo(f"ws://{ws.http_address}/echo"))
            assert refused.value.response.status_code == 403

            app = (("application", "streams"),)
            with grpc.insecure_channel(target) as channel:
                assert calls.echo(streams_pb2_grpc.StreamsStub(channel), app, n=3) == [0, 1, 2]
            with grpc.insecure_channel(streams.grpc_address) as channel:
                with pytest.raises(grpc.RpcError) as denied:
                    calls.echo(streams_pb2_grpc.StreamsStub(channel), (), n=3)
                assert denied.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert "x-servefleet-hop" in (denied.value.details() or "")
                hop = (("x-servefleet-hop", getattr(client.hop_pass(), "pass")),)
                assert calls.echo(streams_pb2_grpc.StreamsStub(channel), hop, n=3) == [0, 1, 2]
            client.shutdown()
    finally:
        if proxy is not None:
            proxy.stop()
        controller.stop()


def test_user_code_gets_no_pass_in_a_scope_or_grpc_metadata() -> None:
    """What WebSockets and gRPC methods taking grpc_context see (the HTTP path:
    test_replicas_serve_only_the_clusters_callers)."""
    from servefleet.replica.hop_gate import metadata_without_pass, without_pass

    scope = {"headers": [(b"host", b"x"), (b"x-servefleet-hop", b"sfh1.a.b"),
                         (b"x-custom", b"1")]}
    assert without_pass(scope)["headers"] == [(b"host", b"x"), (b"x-custom", b"1")]
    assert metadata_without_pass([("x-servefleet-hop", "sfh1.a.b"), ("application", "a")]) \
        == (("application", "a"),)
