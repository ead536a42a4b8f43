"""The controller's HTTP face on a cluster with TLS and tokens (real processes):
HTTPS only, a reader token or a client certificate for anything with data,
no foreign Host names, and no secret of a deployment's environment in what it
shows; specs over the API show env values and user_config only to roles that
may write them."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import httpx
import pytest

from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import Credentials, TlsFiles
from servefleet._private.testing import ControllerProcess, free_port, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
SECRET = "sk-live-4f9a8b7c6d5e"


@pytest.fixture
def secured(tmp_path: Path, cluster: str):
    certs = tmp_path / "certs"
    init_certs(certs)
    path = tmp_path / "tokens"
    issued = {role: tokens.create(path, f"{role}-1", role)
              for role in ("reader", "deployer", "admin")}
    http = f"127.0.0.1:{free_port()}"
    controller = ControllerProcess(
        f"sqlite://{tmp_path}/state.db", cluster=cluster, log_dir=tmp_path, certs=certs,
        extra_args=["--auth-tokens", str(path), "--metrics-listen", http,
                    "--allow-working-dir", "/", "--allow-http-host", "servefleet.example"])
    controller.start()
    try:
        yield controller, certs, issued, http
    finally:
        controller.stop()


def client(controller: ControllerProcess, certs: Path, token: str) -> ControllerClient:
    return ControllerClient([controller.address], timeout=30, credentials=Credentials(
        TlsFiles.from_dir(certs, "client"), token=token))


def test_the_http_face_needs_tls_credentials_and_a_known_name(secured) -> None:
    controller, certs, issued, http = secured
    with client(controller, certs, issued["deployer"]) as deployer:
        deployer.deploy(dpb.DeploymentSpec(
            name="Quotes", import_path="failing_app:Quotes",
            runtime=dpb.RuntimeOptions(working_dir=APPS, env={"API_KEY": SECRET}),
            replica_config=dpb.ReplicaConfig(num_replicas=1,
                                              user_config_json='{"password": "hunter22"}')))
        wait_for(lambda: deployer.status().applications[0].deployments[0].status
                 == status_pb2.DEPLOYMENT_STATUS_DEPLOY_FAILED, 90, "the failure")
        assert SECRET not in str(deployer.status())  # scrubbed for everyone
        assert SECRET in str(deployer.get("Quotes").spec.runtime.env)  # a deployer's own

    verify = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    base = f"https://{http}"
    with pytest.raises(httpx.HTTPError):  # plain HTTP is not served
        httpx.get(f"http://{http}/api/status", timeout=5)
    for path in ("/api/status", "/metrics", "/-/metrics-targets"):
        anonymous = httpx.get(base + path, verify=verify, timeout=10)
        assert anonymous.status_code == 401, (path, anonymous.text)
    assert httpx.get(base + "/-/dashboard", verify=verify).status_code == 200  # no data

    reader = {"authorization": f"Bearer {issued['reader']}"}
    shown = httpx.get(base + "/api/status", headers=reader, verify=verify, timeout=10)
    assert shown.status_code == 200
    assert "cannot log in with key ***" in shown.text
    assert SECRET not in shown.text and "hunter22" not in shown.text
    assert httpx.get(base + "/metrics", headers=reader, verify=verify).status_code == 200
    for host in ("evil.example", "evil.example:8265"):
        foreign = httpx.get(base + "/api/status", headers={**reader, "host": host},
                            verify=verify)
        assert foreign.status_code == 421, foreign.text
    named = httpx.get(base + "/api/status", headers={**reader, "host": "servefleet.example"},
                      verify=verify)
    assert named.status_code == 200
    # A client certificate of an operator's role does instead of a token.
    for role, status in (("admin", 200), ("proxy", 401)):
        context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        context.load_cert_chain(str(certs / f"{role}.crt"), str(certs / f"{role}.key"))
        assert httpx.get(base + "/api/status", verify=context).status_code == status, role


def test_specs_show_secrets_only_to_roles_that_write_them(secured) -> None:
    controller, certs, issued, _ = secured
    app = apb.ApplicationSpec(
        name="web", import_path="graph_app:hello", route_prefix="/web",
        runtime=dpb.RuntimeOptions(working_dir=APPS, env={"API_KEY": SECRET}),
        deployments=[apb.DeploymentOverride(name="hello", replica_config=dpb.ReplicaConfig(
            user_config_json='{"password": "hunter22"}'))])
    with client(controller, certs, issued["deployer"]) as deployer:
        deployer.deploy_applications([app])
        wait_for(lambda: deployer.list(application="web"), 60, "the build")
        assert SECRET in str(deployer.applications()) and "hunter22" in str(
            deployer.applications())
    with client(controller, certs, issued["reader"]) as reader:
        seen = [str(reader.applications()), str(reader.list()), str(reader.get("hello", "web"))]
        for text in seen:
            assert SECRET not in text and "hunter22" not in text
            assert "API_KEY" in text and "***" in text
        assert json.loads(reader.get("hello", "web").spec.replica_config.user_config_json
                          or "null") is None
