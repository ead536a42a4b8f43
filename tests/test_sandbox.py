"""User code runs as a user of its own and with credentials of its own (real processes).

On a cluster with TLS or tokens, a controller running as root starts
replicas that drop to an unprivileged user once they hold their key and token
in memory: they cannot open the controller's keys, token file, store or
their own settings, nor read its environment; their token watches only their
own deployment's config; handles between deployments still work, on a
token-only cluster too. And a runtime.env that acts at interpreter start
(PYTHONPATH) takes effect."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.security.tls import Credentials, TlsFiles
from servefleet._private.testing import ControllerProcess, ProxyProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
HEALTHY = status_pb2.DEPLOYMENT_STATUS_HEALTHY


def healthy(client: ControllerClient, app: str, name: str) -> bool:
    return any(a.name == app and d.name == name and d.status == HEALTHY
               for a in client.status().applications for d in a.deployments)


def replica_url(client: ControllerClient, app: str, name: str) -> str:
    (info,) = client.replicas(app, name)
    return f"http://{info.record.http_address}"


def deploy_graph(client: ControllerClient) -> None:
    client.deploy_applications([apb.ApplicationSpec(
        name="calc", import_path="graph_app:app", route_prefix="/calc",
        runtime=dpb.RuntimeOptions(working_dir=APPS))], partial=True)
    wait_for(lambda: healthy(client, "calc", "Front") and healthy(client, "calc", "Adder"),
             90, "the composed application")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can start user code as another user")
def test_replicas_cannot_read_what_the_controller_holds(tmp_path, cluster) -> None:
    certs = tmp_path / "certs"
    init_certs(certs)
    token_file = tmp_path / "tokens"
    admin = tokens.create(token_file, "admin-1", "admin")
    store = tmp_path / "state.db"
    controller = ControllerProcess(f"sqlite://{store}", cluster=cluster, log_dir=tmp_path,
                                   certs=certs, extra_args=["--auth-tokens", str(token_file),
                                                            "--allow-working-dir", "/"])
    controller.start()
    credentials = Credentials(TlsFiles.from_dir(certs, "admin"), token=admin)
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=credentials) as client:
            client.deploy(dpb.DeploymentSpec(name="Probe", import_path="probe_app:Probe",
                                             runtime=dpb.RuntimeOptions(working_dir=APPS)))
            client.deploy(dpb.DeploymentSpec(name="Other", application="other",
                                             import_path="echo_app:Echo",
                                             runtime=dpb.RuntimeOptions(working_dir=APPS)))
            wait_for(lambda: healthy(client, "default", "Probe"), 90, "the probe")
            (probe,) = client.replicas("default", "Probe")
            settings = Path(controller.runtime_dir) / cluster / \
                f"{probe.record.replica_id}.json"
            secrets = [str(certs / "admin.key"), str(certs / "controller.key"),
                       str(token_file), str(store), str(settings),
                       f"/proc/{controller.proc.pid}/environ"]
            # Straight to the replica: with its admin's hop pass (issue 52).
            hop = {"x-servefleet-hop": getattr(client.hop_pass(), "pass")}
            seen = httpx.get(replica_url(client, "default", "Probe"), timeout=30, headers=hop,
                             params={"path": secrets, "controller": controller.address,
                                     "watch": ["config/default/Probe",
                                               "config/other/Other"]}).json()
            assert seen["uid"] not in (0, os.geteuid()), seen
            assert all(v.startswith("denied") for v in seen["opens"].values()), seen["opens"]
            assert not set(seen["servefleet_env"]) & {
                "SERVEFLEET_TOKEN", "SERVEFLEET_CERTS", "SERVEFLEET_CLUSTER_CA",
                "SERVEFLEET_CLUSTER_CERT", "SERVEFLEET_CLUSTER_KEY"}, seen
            assert seen["watch"] == {"config/default/Probe": "snapshot",
                                     "config/other/Other": "PERMISSION_DENIED"}
            deploy_graph(client)
            answer = httpx.get(replica_url(client, "calc", "Front"), params={"x": 1}, timeout=30,
                               headers=hop)
            assert answer.status_code == 200 and answer.json()["call"] == 11, answer.text
            client.shutdown()
    finally:
        controller.stop()


def test_a_token_only_cluster_composes_and_serves_through_a_proxy(tmp_path, cluster) -> None:
    token_file = tmp_path / "tokens"
    admin = tokens.create(token_file, "admin-1", "admin")
    proxy_token = tokens.create(token_file, "proxy-1", "proxy")
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, extra_args=[
                                       "--auth-tokens", str(token_file),
                                       "--allow-working-dir", "/"]).start()
    proxy = None
    try:
        with ControllerClient([controller.address], timeout=30,
                              credentials=Credentials(token=admin)) as client:
            deploy_graph(client)
            os.environ["SERVEFLEET_TOKEN"] = proxy_token  # the proxy's, inherited
            try:
                proxy = ProxyProcess([controller.address], log_dir=tmp_path).start()
            finally:
                del os.environ["SERVEFLEET_TOKEN"]
            wait_for(lambda: httpx.get(proxy.url + "/calc", params={"x": 2},
                                       timeout=30).status_code == 200, 60, "the proxy serves")
            assert httpx.get(proxy.url + "/calc", params={"x": 2}).json()["call"] == 12
            assert "refused Watch" not in controller.logs()
            client.shutdown()
    finally:
        if proxy is not None:
            proxy.stop()
        controller.stop()


def test_pythonpath_in_runtime_env_takes_effect(tmp_path, cluster, sqlite_fleet) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "only_on_pythonpath.py").write_text("VALUE = 'found through PYTHONPATH'\n")
    sqlite_fleet.start(1, runtime="process")
    with ControllerClient(sqlite_fleet.addresses(), timeout=30) as client:
        client.deploy(dpb.DeploymentSpec(name="Env", import_path="env_app:found",
                                         runtime=dpb.RuntimeOptions(
                                             working_dir=APPS, env={"PYTHONPATH": str(extra)})))
        wait_for(lambda: healthy(client, "default", "Env"), 90, "Env healthy")
        answer = httpx.get(replica_url(client, "default", "Env"), timeout=30)
        assert answer.text == "found through PYTHONPATH", answer.text
        client.shutdown()
