"""Tokens, roles, TLS settings and the authorizer (pure: files in tmp_path, a fake call context)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from servefleet._private.grpc_guard import Refused
from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.security.roles import may_call, unwatchable_key
from servefleet._private.security.tls import Credentials, TlsConfigError, TlsFiles, peer_role
from servefleet.controller.api.auth import Authorizer, bearer_token
from servefleet.controller.errors import Unauthenticated
from servefleet.v1 import watch_pb2


class FakeContext:
    """What the authorizer reads from a gRPC call: metadata and the peer's certificate."""

    def __init__(self, token: str | None = None, ou: str | None = None) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._auth = {"x509_subject": [f"CN=x,OU={ou},O=servefleet".encode()]} if ou else {}

    def invocation_metadata(self):
        return self._metadata

    def auth_context(self):
        return self._auth


def test_tokens_are_stored_as_hashes_and_revoked_by_name(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    alice = tokens.create(path, "alice", "deployer")
    bob = tokens.create(path, "bob", "reader")
    assert alice not in path.read_text() and bob not in path.read_text()
    assert path.stat().st_mode & 0o077 == 0
    table = tokens.TokenTable.load(path)
    assert table.lookup(alice).role == "deployer" and table.lookup(bob).name == "bob"
    assert table.lookup(alice + "x") is None
    tokens.revoke(path, "alice")
    assert tokens.TokenTable.load(path).lookup(alice) is None
    assert tokens.TokenTable.load(path).lookup(bob) is not None


@pytest.mark.parametrize("name, role, message", [
    ("bob", "reader", "exists"),
    ("carol", "root", "is not one of"),
    ("has space", "reader", "no spaces"),
    ("", "reader", "1-64"),
])
def test_bad_token_requests_name_the_problem(tmp_path: Path, name: str, role: str,
                                             message: str) -> None:
    path = tmp_path / "tokens"
    tokens.create(path, "bob", "reader")
    before = path.read_text()
    with pytest.raises(tokens.TokenFileError, match=message):
        tokens.create(path, name, role)
    assert path.read_text() == before
    with pytest.raises(tokens.TokenFileError, match="no token named"):
        tokens.revoke(path, "nobody")


@pytest.mark.parametrize("line, message", [
    ("alice deployer", "expected 'NAME ROLE"),
    ("alice replica sha256:" + "0" * 64, "role 'replica'"),  # the controller issues those
    ("alice reader sha256:xyz", "64 lowercase hex"),
])
def test_a_token_file_that_does_not_parse_names_the_line(tmp_path: Path, line: str,
                                                         message: str) -> None:
    path = tmp_path / "tokens"
    path.write_text("# comment\n\n" + line + "\n")
    with pytest.raises(tokens.TokenFileError, match=f"{path}:3: .*{message}"):
        tokens.TokenTable.load(path)


def test_roles() -> None:
    assert may_call("reader", "GetStatus") and not may_call("reader", "Deploy")
    assert may_call("deployer", "Deploy") and not may_call("deployer", "Shutdown")
    assert may_call("admin", "Shutdown")
    assert may_call("proxy", "StreamLoad") and not may_call("proxy", "Deploy")
    assert not may_call("client", "GetStatus") and not may_call("nobody", "GetStatus")
    assert unwatchable_key("reader", ["routes", "replicas/"]) is None
    assert unwatchable_key("reader", ["routes", "config/a/b"]) == "config/a/b"
    assert unwatchable_key("admin", ["config/"]) is None
    # Config carries user_config: a proxy never needs it, a replica only its own.
    assert unwatchable_key("proxy", ["routes", "config/"]) == "config/"
    assert unwatchable_key("replica", ["config/a/b"]) == "config/a/b"  # a shared certificate
    assert unwatchable_key("replica", ["config/a/b", "replicas/a/c"], ("a", "b")) is None
    assert unwatchable_key("replica", ["config/a/c"], ("a", "b")) == "config/a/c"
    assert unwatchable_key("replica", ["config/"], ("a", "b")) == "config/"


def test_peer_role_reads_the_certificate_ou() -> None:
    assert peer_role({"x509_subject": [b"CN=servefleet-proxy,OU=proxy,O=servefleet"]}) == "proxy"
    assert peer_role({"x509_subject": [b"CN=a\\,OU=admin,O=x"]}) is None  # an escaped comma
    assert peer_role({}) is None


def test_tls_settings_name_what_is_missing(tmp_path: Path) -> None:
    assert TlsFiles.from_settings("proxy", env={}) is None
    with pytest.raises(TlsConfigError, match="--cluster-key missing"):
        TlsFiles.from_settings("proxy", None, "ca", "cert", None, env={})
    with pytest.raises(TlsConfigError, match="no such file"):
        TlsFiles.from_settings("proxy", str(tmp_path), env={})
    init_certs(tmp_path)
    files = TlsFiles.from_settings("proxy", env={"SERVEFLEET_CERTS": str(tmp_path)})
    assert files is not None and files.cert == tmp_path / "proxy.crt"
    creds = Credentials.from_env("admin", {"SERVEFLEET_CERTS": str(tmp_path),
                                           "SERVEFLEET_TOKEN": "t"})
    assert creds.metadata == (("authorization", "Bearer t"),)
    assert Credentials.from_env("x", creds.to_env()) == creds


def test_init_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    init_certs(tmp_path)
    with pytest.raises(FileExistsError, match="--force"):
        init_certs(tmp_path)
    init_certs(tmp_path, force=True, hosts=["controller1", "10.0.0.5"])


async def test_the_authorizer_decides_from_token_then_certificate(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    reader = tokens.create(path, "r", "reader")
    auth = Authorizer(path, tls=True)
    assert auth.role(FakeContext(reader)) == "reader"
    assert auth.role(FakeContext(reader, ou="admin")) == "reader"  # the token wins
    assert auth.role(FakeContext(ou="proxy")) == "proxy"
    for context, message in [(FakeContext(), "no credentials"),
                             (FakeContext("sft_wrong"), "unknown or revoked"),
                             (FakeContext(ou="client"), "carries no role")]:
        with pytest.raises(Unauthenticated, match=message):
            auth.role(context)
    with pytest.raises(Refused) as denied:
        await auth.check("Deploy", None, FakeContext(reader))
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert "Deploy" in denied.value.message and "'reader'" in denied.value.message
    watch = watch_pb2.WatchRequest(known={"routes": "", "config/a/b": ""})
    with pytest.raises(Refused, match="config/a/b"):
        await auth.check("Watch", watch, FakeContext(reader))
    with pytest.raises(Refused, match="config/a/b"):  # the shared replica certificate
        await auth.check("Watch", watch, FakeContext(ou="replica"))
    # A replica's own token (its record's hash) watches its own deployment's config.
    auth.replica_tokens = {tokens.digest("sfr_mine"): ("a", "b")}.get
    await auth.check("Watch", watch, FakeContext("sfr_mine", ou="replica"))
    with pytest.raises(Refused, match="config/a/c"):
        await auth.check("Watch", watch_pb2.WatchRequest(known={"config/a/c": ""}),
                         FakeContext("sfr_mine", ou="replica"))
    with pytest.raises(Refused, match="unknown replica token"):
        await auth.check("Watch", watch, FakeContext("sfr_forged", ou="replica"))
    as_proxy = watch_pb2.WatchRequest(known={"routes": ""}, kind=watch_pb2.WATCHER_KIND_PROXY)
    with pytest.raises(Refused, match="only admin or proxy may watch as a WATCHER_KIND_PROXY"):
        await auth.check("Watch", as_proxy, FakeContext(reader))
    await auth.check("Watch", as_proxy, FakeContext(ou="proxy"))


def test_reload_keeps_the_old_table_when_the_file_breaks(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    token = tokens.create(path, "a", "admin")
    auth = Authorizer(path)
    path.write_text("garbage\n")
    auth.reload()
    assert auth.role(FakeContext(token)) == "admin"
    path.unlink()
    tokens.create(path, "b", "reader")
    auth.reload()
    with pytest.raises(Unauthenticated):
        auth.role(FakeContext(token))


def test_without_tokens_or_tls_everyone_is_admin() -> None:
    auth = Authorizer()
    assert not auth.enabled and auth.role(FakeContext()) == "admin"
    with pytest.raises(Unauthenticated, match="not a Bearer credential"):
        bearer_token((("authorization", "Basic x"),))


@pytest.mark.parametrize("metadata, why", [
    ((("authorization", "Bearer a"), ("authorization", "Bearer b")), "2 authorization values"),
    ((("authorization-bin", b"\x00"),), "binary authorization metadata"),
    ((("authorization", b"Bearer \xff"),), "byte 0xff at byte 8"),
    ((("authorization", "Bearer a\tb"),), "a tab at character 9"),
    ((("authorization", "Bearer ab "),), "a space at character 3"),
    ((("authorization", "Bearer a=b"),), "characters a bearer token cannot have"),
])
def test_a_credential_that_cannot_be_read_names_why(metadata, why: str) -> None:
    with pytest.raises(Unauthenticated, match=f"unreadable credentials: .*{why}"):
        bearer_token(metadata)
    auth = Authorizer(tls=True)  # the certificate would be admin: never used instead
    context = FakeContext(ou="admin")
    context._metadata = metadata
    with pytest.raises(Unauthenticated, match=why):
        auth.role(context)


def test_bearer_tokens_as_issued_are_read() -> None:
    token = tokens.PREFIX + "Ab-_9"
    for value in (f"Bearer {token}", f"bearer   {token}", f"BEARER {token}", "Bearer a+/b=="):
        assert bearer_token((("user-agent", "x"), ("authorization", value))) == value.split()[-1]
    assert bearer_token((("user-agent", "x"),)) is None
    with pytest.raises(TlsConfigError, match="the token holds a NUL at character 2"):
        Credentials(token="a\x00")
