"""Bearer tokens and roles against a real controller process (plain text on loopback)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from servefleet._private.security import tokens
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient, ControllerError
from servefleet.v1 import controller_pb2, controller_pb2_grpc, watch_pb2
from servefleet.v1 import deployment_pb2 as d


@pytest.fixture
def guarded(tmp_path: Path, cluster: str) -> Iterator[tuple[ControllerProcess, Path, dict]]:
    path = tmp_path / "tokens"
    issued = {role: tokens.create(path, f"{role}-1", role)
              for role in ("reader", "deployer", "admin")}
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   runtime="none", log_dir=tmp_path,
                                   extra_args=["--auth-tokens", str(path)]).start()
    try:
        yield controller, path, issued
    finally:
        controller.stop()


def client(controller: ControllerProcess, token: str | None) -> ControllerClient:
    return ControllerClient([controller.address], timeout=10,
                            credentials=Credentials(token=token))


def spec(name: str = "Model") -> d.DeploymentSpec:
    return d.DeploymentSpec(name=name, import_path="m:app", route_prefix=f"/{name.lower()}")


def refused(call) -> ControllerError:
    with pytest.raises(ControllerError) as caught:
        call()
    return caught.value


def test_each_role_may_call_its_methods_and_no_more(guarded) -> None:
    controller, _, issued = guarded
    with client(controller, issued["admin"]) as admin:
        wait_for(lambda: admin.status() is not None, 20, "the controller leads")
    with client(controller, issued["reader"]) as reader:
        assert reader.list() == []
        error = refused(lambda: reader.deploy(spec()))
        assert error.code == grpc.StatusCode.PERMISSION_DENIED
        assert "Deploy" in error.details and "reader" in error.details
    with client(controller, issued["deployer"]) as deployer:
        deployer.deploy(spec())
        assert [r.spec.name for r in deployer.list()] == ["Model"]
        error = refused(deployer.shutdown)
        assert error.code == grpc.StatusCode.PERMISSION_DENIED and "Shutdown" in error.details
    with client(controller, None) as anonymous:
        error = refused(anonymous.status)
        assert error.code == grpc.StatusCode.UNAUTHENTICATED and "no credentials" in error.details
    with client(controller, "sft_made_up") as forged:
        assert refused(forged.status).code == grpc.StatusCode.UNAUTHENTICATED


def test_a_reader_watches_routes_but_not_config(guarded) -> None:
    controller, _, issued = guarded
    metadata = Credentials(token=issued["reader"]).metadata
    with grpc.insecure_channel(controller.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        wait_for(lambda: stub.ListDeployments(controller_pb2.ListDeploymentsRequest(),
                                              metadata=metadata, timeout=2) is not None, 20)
        stream = stub.Watch(watch_pb2.WatchRequest(known={"routes": ""}, heartbeat_s=1),
                            metadata=metadata, timeout=5)
        assert next(stream).HasField("snapshot")
        stream.cancel()
        with pytest.raises(grpc.RpcError) as denied:
            next(stub.Watch(watch_pb2.WatchRequest(known={"config/default/Model": ""}),
                            metadata=metadata, timeout=5))
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_revoked_token_is_refused_after_sighup(guarded) -> None:
    controller, path, issued = guarded
    with client(controller, issued["admin"]) as admin:
        wait_for(lambda: admin.status() is not None, 20, "the controller leads")
        tokens.revoke(path, "admin-1")
        assert admin.status() is not None  # not reread yet
        controller.signal(signal.SIGHUP)
        wait_for(lambda: "reloaded 2 tokens" in controller.logs(), 10, "the reload")
        assert refused(admin.status).code == grpc.StatusCode.UNAUTHENTICATED
    newcomer = tokens.create(path, "admin-2", "admin")
    controller.signal(signal.SIGHUP)
    with client(controller, newcomer) as admin:
        wait_for(lambda: _works(admin), 10, "the new token accepted")
        admin.shutdown()
    assert controller.proc is not None and controller.proc.wait(20) == 0


def _works(c: ControllerClient) -> bool:
    try:
        c.status()
        return True
    except ControllerError:
        return False


def test_the_cli_creates_tokens_and_sends_them(guarded, capsys) -> None:
    from servefleet._private.cli.main import main

    controller, path, _ = guarded
    assert main(["token", "create", "ci", "--role", "reader", "--file", str(path)]) == 0
    token = capsys.readouterr().out.strip()
    assert token.startswith("sft_") and token not in path.read_text()
    assert main(["token", "create", "ci", "--role", "reader", "--file", str(path)]) == 2
    assert "exists" in capsys.readouterr().err
    controller.signal(signal.SIGHUP)
    wait_for(lambda: "reloaded 4 tokens" in controller.logs(), 10, "the reload")
    assert main(["status", "--controller", controller.address, "--token", token]) == 0
    capsys.readouterr()
    assert main(["status", "--controller", controller.address]) == 1
    err = capsys.readouterr().err
    assert "UNAUTHENTICATED" in err and "Traceback" not in err
    assert main(["token", "revoke", "ci", "--file", str(path)]) == 0
    assert main(["token", "revoke", "ci", "--file", str(path)]) == 2


def test_a_revoked_tokens_open_watch_stream_is_ended_on_sighup(guarded) -> None:
    controller, path, _ = guarded
    watcher = tokens.create(path, "watcher", "admin")
    controller.signal(signal.SIGHUP)
    metadata = Credentials(token=watcher).metadata
    with grpc.insecure_channel(controller.address) as channel:
        stub = controller_pb2_grpc.ControllerServiceStub(channel)
        wait_for(lambda: _leads(stub, metadata), 20, "the controller leads with the new token")
        stream = stub.Watch(watch_pb2.WatchRequest(known={"routes": ""}, heartbeat_s=0.2),
                            metadata=metadata, timeout=30)
        assert next(stream).HasField("snapshot")
        assert next(stream).HasField("heartbeat")  # open, and being fed
        tokens.revoke(path, "watcher")
        controller.signal(signal.SIGHUP)
        with pytest.raises(grpc.RpcError) as ended:
            for _ in range(100):  # 20 s of heartbeats at most
                next(stream)
        assert ended.value.code() in (grpc.StatusCode.CANCELLED,
                                      grpc.StatusCode.UNAUTHENTICATED), ended.value
        with pytest.raises(grpc.RpcError) as again:
            next(stub.Watch(watch_pb2.WatchRequest(known={"routes": ""}), metadata=metadata,
                            timeout=5))
        assert again.value.code() == grpc.StatusCode.UNAUTHENTICATED


def _leads(stub, metadata) -> bool:
    try:
        stub.ListDeployments(controller_pb2.ListDeploymentsRequest(), metadata=metadata,
                             timeout=2)
    except grpc.RpcError:
        return False
    return True
