"""Certificates revoked one by one (`--revoked-certs`, `servefleet certs
revoke`), end to end: a controller, its HTTP face and its replicas from one
`servefleet certs init` directory, real processes and real handshakes."""

from __future__ import annotations

import signal
import ssl
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from servefleet._private.cli.main import main
from servefleet._private.security.certs import init_certs, issue_cert, role_server_name
from servefleet._private.security.hop_tls import REPLICA_SERVER_NAME, client_context
from servefleet._private.security.revocation import certificate_serial
from servefleet._private.security.tls import Credentials, TlsFiles
from servefleet._private.testing import ControllerProcess, free_port, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import (
    controller_pb2,
    controller_pb2_grpc,
    replica_pb2,
    replica_pb2_grpc,
    watch_pb2,
)
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = pytest.mark.slow
# Certificates of their own, each for one test: revoking one leaves the others.
HOLDERS = {"stolen": "admin", "laptop": "admin", "watcher": "admin", "spare": "proxy",
           "rogue": "controller", "edge": "proxy", "second": "controller", "holder": "proxy"}
APPS = str(Path(__file__).parent / "apps")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    base = tmp_path_factory.mktemp("revocation")
    certs = base / "certs"
    init_certs(certs)
    for name, role in HOLDERS.items():
        issue_cert(certs, name, role)
    revoked = base / "revoked.txt"
    for name in ("stolen", "rogue"):
        assert main(["certs", "revoke", str(certs / f"{name}.crt"), "--file", str(revoked)]) == 0
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(
        f"sqlite://{base}/state.db", log_dir=base, certs=certs,
        extra_args=["--revoked-certs", str(revoked), "--metrics-listen", http,
                    "--replica-tls", "on"])
    controller.start()
    try:
        yield {"controller": controller, "certs": certs, "revoked": revoked, "http": http}
    finally:
        controller.stop()


def holder(certs: Path, name: str) -> Credentials:
    return Credentials(TlsFiles(certs / "ca.crt", certs / f"{name}.crt", certs / f"{name}.key"))


def serial(certs: Path, name: str) -> str:
    return certificate_serial(certs / f"{name}.crt")[0]


def list_deployments(controller: ControllerProcess, credentials: Credentials) -> None:
    with credentials.channel(controller.address) as channel:
        controller_pb2_grpc.ControllerServiceStub(channel).ListDeployments(
            controller_pb2.ListDeploymentsRequest(), timeout=10)


def refusal(controller: ControllerProcess, credentials: Credentials) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        list_deployments(controller, credentials)
    return refused.value


def http_status(cluster: dict, name: str) -> int:
    """What the controller's HTTP face answers `name`'s certificate (admin: 200)."""
    certs = cluster["certs"]
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(certs / f"{name}.crt", certs / f"{name}.key")
    return httpx.get(f"https://{cluster['http']}/api/status", verify=context,
                     timeout=10).status_code


def test_a_certificate_listed_at_start_is_refused_by_the_api_and_the_http_face(
        cluster: dict) -> None:
    controller, certs = cluster["controller"], cluster["certs"]
    wait_for(lambda: _works(controller, holder(certs, "laptop")), 30, "the controller leads")
    refused = refusal(controller, holder(certs, "stolen"))
    assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
    assert refused.details() == (f"the certificate with serial {serial(certs, 'stolen')} "
                                 "is revoked")
    assert http_status(cluster, "laptop") == 200
    with pytest.raises(httpx.TransportError):  # closed right after the handshake
        http_status(cluster, "stolen")


def test_sighup_revokes_a_certificate_and_ends_the_streams_it_opened(cluster: dict) -> None:
    controller, certs = cluster["controller"], cluster["certs"]
    watcher = holder(certs, "watcher")
    wait_for(lambda: _works(controller, watcher), 30, "the controller leads")
    assert http_status(cluster, "watcher") == 200
    with watcher.channel(controller.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        stream = stub.Watch(watch_pb2.WatchRequest(known={"routes": ""}, heartbeat_s=0.2),
                            timeout=60)
        assert next(stream).HasField("snapshot")
        assert next(stream).HasField("heartbeat")  # open, and being fed
        assert main(["certs", "revoke", str(certs / "watcher.crt"),
                     "--file", str(cluster["revoked"])]) == 0
        assert next(stream).HasField("heartbeat")  # the file alone changes nothing
        controller.signal(signal.SIGHUP)
        with pytest.raises(grpc.RpcError) as ended:
            for _ in range(150):  # 30 s of heartbeats at most
                next(stream)
        assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED, ended.value
        assert "is revoked" in (ended.value.details() or "")
    assert refusal(controller, watcher).code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(httpx.TransportError):
        http_status(cluster, "watcher")
    # Others, and the admin's own certificate, are untouched.
    list_deployments(controller, holder(certs, "laptop"))
    list_deployments(controller, controller.credentials)


def test_replicas_hear_the_list_with_the_hop_trust(cluster: dict) -> None:
    """The `hop` key of the Watch stream carries it, and a SIGHUP that changes
    it publishes it again (what replicas check their ports by)."""
    controller, certs = cluster["controller"], cluster["certs"]
    with controller.credentials.channel(controller.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        wait_for(lambda: _works(controller, controller.credentials), 30, "the controller leads")
        stream = stub.Watch(watch_pb2.WatchRequest(known={"hop": ""}, heartbeat_s=0.2),
                            timeout=60)
        first = next(stream).snapshot
        assert serial(certs, "stolen") in first.hop.revoked_certificates
        assert serial(certs, "spare") not in first.hop.revoked_certificates
        assert main(["certs", "revoke", str(certs / "spare.crt"),
                     "--file", str(cluster["revoked"])]) == 0
        controller.signal(signal.SIGHUP)
        update = next(m for m in stream if m.HasField("snapshot")).snapshot
        assert serial(certs, "spare") in update.hop.revoked_certificates
        assert update.hop.keys == first.hop.keys  # the rest of the trust as it was
        stream.cancel()


def test_the_hop_passes_a_revoked_certificate_got_are_revoked(cluster: dict) -> None:
    """Replicas' ports without TLS take a pass alone: one got with the
    certificate before its revocation is revoked with it."""
    controller, certs = cluster["controller"], cluster["certs"]
    with ControllerClient([controller.address], timeout=30,
                          credentials=holder(certs, "holder")) as client:
        issued = client.hop_pass()
    assert issued.subject == f"cert:proxy:{serial(certs, 'holder')}"
    with controller.credentials.channel(controller.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        stream = stub.Watch(watch_pb2.WatchRequest(known={"hop": ""}, heartbeat_s=0.2),
                            timeout=60)
        assert issued.subject not in {r.subject for r in next(stream).snapshot.hop.revoked}
        assert main(["certs", "revoke", str(certs / "holder.crt"),
                     "--file", str(cluster["revoked"])]) == 0
        controller.signal(signal.SIGHUP)
        for message in stream:
            if issued.subject in {r.subject for r in message.snapshot.hop.revoked}:
                break
        stream.cancel()


def test_a_revocation_file_that_does_not_parse_keeps_the_list_in_force(
        cluster: dict) -> None:
    controller, certs, revoked = cluster["controller"], cluster["certs"], cluster["revoked"]
    before = revoked.read_text()
    try:
        revoked.write_text("not-a-serial\n")
        controller.signal(signal.SIGHUP)
        wait_for(lambda: "kept the previous revoked certificates" in controller.logs(), 10,
                 "the error logged")
        assert refusal(controller, holder(certs, "stolen")).code() == (
            grpc.StatusCode.UNAUTHENTICATED)
    finally:
        revoked.write_text(before)


def test_the_controller_will_not_start_on_a_file_that_does_not_parse(tmp_path: Path,
                                                                     capsys) -> None:
    revoked = tmp_path / "revoked.txt"
    revoked.write_text("# fine\nserial=XYZ\n")
    code = main(["controller", "--store", f"sqlite://{tmp_path}/state.db",
                 "--revoked-certs", str(revoked)])
    err = capsys.readouterr().err
    assert code == 2 and f"--revoked-certs: {revoked}:2: 'serial=XYZ' is not a serial" in err
    assert "Traceback" not in err


def _works(controller: ControllerProcess, credentials: Credentials) -> bool:
    try:
        list_deployments(controller, credentials)
    except grpc.RpcError:
        return False
    return True


# -- replicas --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replica(cluster: dict) -> Iterator[replica_pb2.ReplicaInfo]:
    """One replica of a deployment streaming ticks, serving TLS on its HTTP port."""
    controller = cluster["controller"]
    with ControllerClient([controller.address], timeout=30,
                          credentials=controller.credentials) as client:
        client.deploy(dpb.DeploymentSpec(
            name="Ticks", import_path="ticks_app:ticks", route_prefix="/ticks",
            runtime=dpb.RuntimeOptions(working_dir=APPS),
            replica_config=dpb.ReplicaConfig(num_replicas=1)))

        def running() -> list[replica_pb2.ReplicaInfo]:
            return [r for r in client.replicas(deployment="Ticks")
                    if r.state == replica_pb2.REPLICA_STATE_RUNNING]
        wait_for(running, 90, "the Ticks replica running")
        found = running()[0]
        assert found.record.http_tls
        yield found
        client.delete(["Ticks"])


def control_call(info: replica_pb2.ReplicaInfo, certs: Path, name: str) -> str:
    """GetMetadata on the replica's control port with `name`'s certificate."""
    credentials = holder(certs, name).with_server_name(role_server_name("replica"))
    with credentials.channel(info.record.control_address) as channel:
        return replica_pb2_grpc.ReplicaServiceStub(channel).GetMetadata(
            replica_pb2.GetMetadataRequest(), timeout=10).replica_id


def control_refusal(info: replica_pb2.ReplicaInfo, certs: Path, name: str) -> str | None:
    """The refusal's details, or None when the call was served."""
    try:
        control_call(info, certs, name)
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNAUTHENTICATED, e
        return e.details()
    return None


def http_client(certs: Path, name: str) -> httpx.Client:
    tls = TlsFiles(certs / "ca.crt", certs / f"{name}.crt", certs / f"{name}.key")
    return httpx.Client(verify=client_context(tls), timeout=10)


def http_refused(info: replica_pb2.ReplicaInfo, certs: Path, name: str) -> bool:
    with http_client(certs, name) as caller:
        try:
            caller.get(f"https://{info.record.http_address}/", headers={
                "host": REPLICA_SERVER_NAME}, params={"n": "1"}).raise_for_status()
        except httpx.TransportError:
            return True
    return False


def test_a_replica_refuses_certificates_listed_when_it_started(
        cluster: dict, replica: replica_pb2.ReplicaInfo) -> None:
    certs = cluster["certs"]
    # A controller's certificate passes the control port's role check: the
    # revocation alone stops it.
    assert control_refusal(replica, certs, "rogue") == (
        f"the certificate with serial {serial(certs, 'rogue')} is revoked")
    assert control_call(replica, certs, "second") == replica.record.replica_id
    assert http_refused(replica, certs, "stolen")
    assert not http_refused(replica, certs, "edge")


def test_sighup_reaches_replicas_and_ends_what_the_certificate_has_open(
        cluster: dict, replica: replica_pb2.ReplicaInfo) -> None:
    certs = cluster["certs"]
    assert control_call(replica, certs, "second") == replica.record.replica_id
    with http_client(certs, "edge") as caller:
        with caller.stream("GET", f"https://{replica.record.http_address}/",
                           headers={"host": REPLICA_SERVER_NAME}) as stream:
            lines = stream.iter_lines()
            assert next(lines) == "tick 0"  # open, and being fed
            for name in ("edge", "second"):
                assert main(["certs", "revoke", str(certs / f"{name}.crt"),
                             "--file", str(cluster["revoked"])]) == 0
            cluster["controller"].signal(signal.SIGHUP)
            seen = 1
            with pytest.raises(httpx.TransportError):  # cut, where it would run 20 s
                for _ in lines:
                    seen += 1
            assert seen < 399
    wait_for(lambda: control_refusal(replica, certs, "second") is not None, 30,
             "the control port refusing the certificate")
    assert http_refused(replica, certs, "edge")
    # The same replica, without a restart; the controller's own certificate still calls it.
    assert control_call(replica, certs, "controller") == replica.record.replica_id
