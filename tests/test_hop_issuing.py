"""The controller issues hop passes and publishes what replicas check them by
(issue 52): a real controller process with tokens, on loopback."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from servefleet._private.security import tokens
from servefleet._private.security.hop import HopRefused, HopVerifier
from servefleet._private.security.tls import Credentials
from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import controller_pb2_grpc, deployment_pb2, watch_pb2


def hop_pass(address: str, token: str | None) -> api.GetHopPassResponse:
    with grpc.insecure_channel(address) as channel:
        return controller_pb2_grpc.ControllerServiceStub(channel).GetHopPass(
            api.GetHopPassRequest(), metadata=Credentials(token=token).metadata, timeout=10)


def leads(address: str) -> bool:
    """The controller answers as the leader (a standby's UNAVAILABLE, right
    after a start, is no answer yet)."""
    with grpc.insecure_channel(address) as channel:
        try:
            controller_pb2_grpc.ControllerServiceStub(channel).GetHopPass(
                api.GetHopPassRequest(), timeout=10)
        except grpc.RpcError as e:
            return e.code() != grpc.StatusCode.UNAVAILABLE
    return True


def trust(address: str, token: str) -> watch_pb2.HopTrust:
    """The `hop` key's snapshot, as a replica's Watch stream gets it."""
    with grpc.insecure_channel(address) as channel:
        stream = controller_pb2_grpc.ControllerServiceStub(channel).Watch(
            watch_pb2.WatchRequest(known={"hop": ""}, heartbeat_s=1),
            metadata=Credentials(token=token).metadata, timeout=10)
        try:
            for response in stream:
                if response.HasField("snapshot") and response.snapshot.key == "hop":
                    return response.snapshot.hop
        finally:
            stream.cancel()
    raise AssertionError("no hop snapshot")


def verifier_of(found: watch_pb2.HopTrust) -> HopVerifier:
    verifier = HopVerifier()
    verifier.trust({k.id: k.public_key for k in found.keys},
                   {r.subject: r.revoked_at.ToNanoseconds() / 1e9 for r in found.revoked})
    return verifier


def controller(tmp_path: Path, cluster: str, *extra: str) -> ControllerProcess:
    return ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster, runtime="none",
                             log_dir=tmp_path, extra_args=list(extra)).start()


def test_passes_name_their_callers_and_outlive_the_controller(tmp_path, cluster) -> None:
    path = tmp_path / "tokens"
    issued = {role: tokens.create(path, f"{role}-1", role)
              for role in ("reader", "deployer", "proxy")}
    first = controller(tmp_path, cluster, "--auth-tokens", str(path))
    try:
        wait_for(lambda: leads(first.address), 20, "a leader")
        with ControllerClient([first.address], credentials=Credentials(
                token=issued["deployer"])) as sdk:
            deployer = sdk.hop_pass()
        assert deployer.subject == "token:deployer-1"
        proxy = hop_pass(first.address, issued["proxy"])
        found = trust(first.address, issued["reader"])  # any role may watch it
        assert found.required and len(found.keys) == 1
        caller = verifier_of(found).check(getattr(deployer, "pass"))
        assert (caller.subject, caller.role, caller.may_call_methods) == (
            "token:deployer-1", "deployer", True)
        assert not verifier_of(found).check(getattr(proxy, "pass")).may_call_methods
        with pytest.raises(grpc.RpcError) as refused:
            hop_pass(first.address, issued["reader"])
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "GetHopPass" in (refused.value.details() or "")
        with pytest.raises(grpc.RpcError) as refused:
            hop_pass(first.address, None)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        first.stop()
    # The key is hard state: the next controller (here, a restart) trusts
    # the passes the first issued.
    second = controller(tmp_path, cluster, "--auth-tokens", str(path))
    try:
        wait_for(lambda: leads(second.address), 20, "a leader")
        again = trust(second.address, issued["reader"])
        assert [k.id for k in again.keys] == [k.id for k in found.keys]
        assert verifier_of(again).check(getattr(deployer, "pass")).subject == "token:deployer-1"
    finally:
        second.stop()


def test_a_cluster_without_credentials_issues_none(tmp_path, cluster) -> None:
    plain = controller(tmp_path, cluster)
    try:
        def answer() -> grpc.StatusCode:
            try:
                hop_pass(plain.address, None)
            except grpc.RpcError as e:
                return e.code()
            return grpc.StatusCode.OK
        wait_for(lambda: answer() != grpc.StatusCode.UNAVAILABLE, 20, "a leader")
        assert answer() == grpc.StatusCode.FAILED_PRECONDITION
        found = trust(plain.address, "")
        assert not found.required
        # Every proxy and replica asks once: an expected answer, not a refusal in
        # the log `servefleet up` shows a new user.
        assert "refused GetHopPass" not in plain.logs()
    finally:
        plain.stop()


def test_a_pass_is_no_pass_for_another_cluster(tmp_path, cluster) -> None:
    """Each cluster makes its own key: one's passes prove nothing to another."""
    path = tmp_path / "tokens"
    token = tokens.create(path, "admin-1", "admin")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = controller(tmp_path / "a", cluster, "--auth-tokens", str(path))
    b = controller(tmp_path / "b", cluster + "b", "--auth-tokens", str(path))
    try:
        wait_for(lambda: leads(a.address) and leads(b.address), 20, "two leaders")
        with pytest.raises(HopRefused, match="does not trust"):
            verifier_of(trust(b.address, token)).check(getattr(hop_pass(a.address, token),
                                                               "pass"))
    finally:
        a.stop()
        b.stop()


def test_a_revoked_token_takes_its_passes_with_it(tmp_path, cluster) -> None:
    """Revoking a token (its file reloaded on SIGHUP) revokes the passes it
    got: replicas refuse them from the next `hop` snapshot on; a new token of
    the same name gets passes that are served."""
    import signal

    path = tmp_path / "tokens"
    reader = tokens.create(path, "reader-1", "reader")
    alice = tokens.create(path, "alice", "deployer")
    ctl = controller(tmp_path, cluster, "--auth-tokens", str(path))
    try:
        wait_for(lambda: leads(ctl.address), 20, "a leader")
        old = getattr(hop_pass(ctl.address, alice), "pass")
        assert verifier_of(trust(ctl.address, reader)).check(old).subject == "token:alice"
        tokens.revoke(path, "alice")
        alice = tokens.create(path, "alice", "deployer")  # the same name, a new token
        ctl.signal(signal.SIGHUP)

        def refused() -> bool:
            try:
                verifier_of(trust(ctl.address, reader)).check(old)
            except HopRefused as e:
                return "revoked" in str(e)
            return False
        wait_for(refused, 20, "the old pass revoked")
        new = getattr(hop_pass(ctl.address, alice), "pass")
        assert verifier_of(trust(ctl.address, reader)).check(new).subject == "token:alice"
    finally:
        ctl.stop()


def test_a_stopped_replica_takes_its_pass_with_it_past_a_restart(tmp_path, cluster) -> None:
    """A replica that stops is revoked in the write that deletes its record
    (one key per revoked subject): the next `hop` snapshot lists it, and so
    does the next controller's, which reads it from the store."""
    path = tmp_path / "tokens"
    admin = tokens.create(path, "admin-1", "admin")
    apps = str(Path(__file__).parent / "apps")

    def start() -> ControllerProcess:
        return ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                 log_dir=tmp_path, extra_args=["--auth-tokens", str(path)]
                                 ).start()
    first = start()
    try:
        wait_for(lambda: leads(first.address), 20, "a leader")
        with ControllerClient([first.address], credentials=Credentials(token=admin)) as sdk:
            sdk.deploy(deployment_pb2.DeploymentSpec(
                name="Echo", import_path="echo_app:Echo",
                runtime=deployment_pb2.RuntimeOptions(working_dir=apps)))
            (replica,) = wait_for(lambda: [r for r in sdk.replicas(deployment="Echo")
                                           if r.record.http_address], 60, "a replica")
            subject = f"replica:{replica.record.replica_id}"
            sdk.delete(["Echo"])
            wait_for(lambda: not sdk.replicas(deployment="Echo"), 60, "the replica stopped")
        assert subject in {r.subject for r in trust(first.address, admin).revoked}
    finally:
        first.stop()
    second = start()
    try:
        wait_for(lambda: leads(second.address), 20, "a leader")
        assert subject in {r.subject for r in trust(second.address, admin).revoked}
    finally:
        second.stop()
