"""The proxy's gRPC ingress port under the HTTP port's rules (issue 52): who
may call ListApplications (--admin-paths, --http-tokens), and the port's
connection cap, idle timeout and streams per connection (--max-connections,
--keep-alive-timeout-s). Real controller and proxy processes."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import grpc
import h2.settings
import pytest
from raw_grpc import settings_and_goaway

from servefleet._private.security import tokens
from servefleet._private.testing import ControllerProcess, ProxyProcess, free_port, wait_for
from servefleet.v1 import ingress_pb2, ingress_pb2_grpc

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    tmp = tmp_path_factory.mktemp("grpc-edge")
    token = tokens.create(tmp / "http-tokens", "viewer", "reader")
    controller = ControllerProcess(f"sqlite://{tmp}/state.db", cluster="grpc-edge",
                                   runtime="none", log_dir=tmp).start()
    ports = {"open": free_port(), "token": free_port()}
    proxies = {
        # The defaults: ListApplications for loopback callers, no tokens.
        "open": ProxyProcess([controller.address], log_dir=tmp, extra_args=[
            "--grpc-listen", f"127.0.0.1:{ports['open']}"]),
        "token": ProxyProcess([controller.address], log_dir=tmp, extra_args=[
            "--grpc-listen", f"127.0.0.1:{ports['token']}", "--admin-paths", "token",
            "--http-tokens", str(tmp / "http-tokens"), "--max-connections", "3",
            "--keep-alive-timeout-s", "1"]),
    }
    try:
        for proxy in proxies.values():
            proxy.start()
        yield controller, ports, token, proxies
    finally:
        for proxy in proxies.values():
            proxy.stop()
        controller.stop()


def list_applications(port: int, metadata: tuple[tuple[str, str], ...] = ()
                      ) -> ingress_pb2.IngressServiceListApplicationsResponse:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return ingress_pb2_grpc.IngressServiceStub(channel).ListApplications(
            ingress_pb2.IngressServiceListApplicationsRequest(), metadata=metadata, timeout=10)


def refused(port: int, metadata: tuple[tuple[str, str], ...] = ()) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list_applications(port, metadata)
    return caught.value


def test_list_applications_answers_whom_admin_paths_lets_read_routes(edge) -> None:
    _, ports, token, _ = edge
    assert list(list_applications(ports["open"]).applications) == []  # a loopback caller
    # Relayed by a balancer on this host: not a local client, and no tokens here.
    relayed = refused(ports["open"], (("x-forwarded-for", "203.0.113.9"),))
    assert relayed.code() == grpc.StatusCode.PERMISSION_DENIED
    details = relayed.details() or ""
    assert "answers loopback clients and bearer tokens only (--admin-paths loopback)" \
        in details and "no --http-tokens" in details

    # --admin-paths token: even a loopback caller needs one of --http-tokens.
    for metadata in ((), (("authorization", "Bearer sft_unknown"),),
                     (("authorization", f"Basic {token}"),)):
        error = refused(ports["token"], metadata)
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
        assert "bearer tokens only (--admin-paths token)" in (error.details() or "")
        assert token not in (error.details() or "")
    assert list(list_applications(ports["token"], (("authorization", f"Bearer {token}"),)
                                  ).applications) == []
    with grpc.insecure_channel(f"127.0.0.1:{ports['token']}") as channel:  # still open
        reply = ingress_pb2_grpc.IngressServiceStub(channel).Healthz(
            ingress_pb2.HealthzRequest(), timeout=10)
    assert reply.message == "success"



HEALTHZ = "/servefleet.v1.IngressService/Healthz"


def healthz(port: int) -> grpc.StatusCode:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            ingress_pb2_grpc.IngressServiceStub(channel).Healthz(ingress_pb2.HealthzRequest(),
                                                                timeout=5)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def test_the_port_caps_connections(edge) -> None:
    _, ports, _, _ = edge
    # --max-connections 3: three connections that send nothing fill the port.
    # The port also closes them once idle for its 1 s keep-alive timeout, so
    # each try opens three fresh ones (on a loaded machine one try can take
    # longer than that).
    def fourth_refused() -> bool:
        held = [socket.create_connection(("127.0.0.1", ports["token"])) for _ in range(3)]
        try:
            return healthz(ports["token"]) == grpc.StatusCode.UNAVAILABLE
        finally:
            for sock in held:
                sock.close()

    wait_for(fourth_refused, 20, "a fourth connection refused")
    assert healthz(ports["open"]) == grpc.StatusCode.OK  # another port, its own count
    wait_for(lambda: healthz(ports["token"]) == grpc.StatusCode.OK, 10, "room again")


def test_the_port_closes_idle_connections_and_bounds_their_streams(edge) -> None:
    _, ports, _, _ = edge
    # --keep-alive-timeout-s 1: an idle connection is sent GOAWAY; gRPC's own
    # default keeps it for good.
    settings, closed = settings_and_goaway(f"127.0.0.1:{ports['token']}", HEALTHZ, 15)
    assert closed
    assert settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS) == 128
