"""The proxy's HTTPS ingress and per-application bearer tokens, with real processes."""

from __future__ import annotations

import signal
import ssl
from pathlib import Path

import httpx
import pytest
from test_app_serving import running

from servefleet._private.security import tokens
from servefleet._private.security.certs import init_certs
from servefleet._private.testing import wait_for
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def test_https_ingress_and_applications_that_require_a_token(served_by, tmp_path: Path) -> None:
    client, start_proxy = served_by
    certs = tmp_path / "certs"
    init_certs(certs)
    token_file = tmp_path / "http-tokens"
    token = tokens.create(token_file, "web-frontend", "reader")
    client.deploy_applications([
        apb.ApplicationSpec(name="private", route_prefix="/private", require_token=True,
                            import_path="headers_app:app",
                            runtime=dpb.RuntimeOptions(working_dir=APPS)),
        apb.ApplicationSpec(name="public", route_prefix="/public",
                            import_path="headers_app:app",
                            runtime=dpb.RuntimeOptions(working_dir=APPS))])
    wait_for(lambda: running(client, "private") and running(client, "public"), 60, "RUNNING")
    proxy = start_proxy("--tls-cert", str(certs / "proxy.crt"),
                        "--tls-key", str(certs / "proxy.key"), "--http-tokens", str(token_file))
    base = f"https://127.0.0.1:{proxy.port}"
    with httpx.Client(verify=ssl.create_default_context(cafile=certs / "ca.crt")) as https:
        wait_for(lambda: https.get(base + "/public").status_code == 200, 30, "routes")
        refused = https.get(base + "/private")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert https.get(base + "/private",
                         headers={"authorization": "Bearer sft_wrong"}).status_code == 401
        for _ in range(3):  # several requests on one kept-alive TLS connection
            seen = https.get(base + "/private", headers={"authorization": f"Bearer {token}"})
            assert seen.status_code == 200
            assert seen.json()["x-servefleet-caller"] == "web-frontend"
            assert "authorization" not in seen.json()  # the token stays at the proxy
            assert seen.json()["x-forwarded-proto"] == "https"
            assert seen.json()["x-forwarded-for"] == "127.0.0.1"
        # A client cannot pose as a caller the proxy checked.
        public = https.get(base + "/public", headers={"x-servefleet-caller": "admin"}).json()
        assert "x-servefleet-caller" not in public
        assert public["x-forwarded-proto"] == "https"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{proxy.port}/public", timeout=3)

    tokens.revoke(token_file, "web-frontend")
    assert proxy.proc is not None
    proxy.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reloaded 0 HTTP tokens" in proxy.logs(), 10, "the proxy reloads")
    with httpx.Client(verify=ssl.create_default_context(cafile=certs / "ca.crt")) as https:
        assert https.get(base + "/private",
                         headers={"authorization": f"Bearer {token}"}).status_code == 401


def test_a_client_cannot_pass_itself_off_as_another_address(served_by) -> None:
    """The proxy adds the client's address to x-forwarded-for; the replica's
    server trusts the proxy (loopback) and takes the client from the right
    end. Before, the client's own x-forwarded-for reached the replica as it
    was, and the replica believed it."""
    client, start_proxy = served_by
    client.deploy_applications([apb.ApplicationSpec(
        name="peer", route_prefix="/peer", import_path="headers_app:peer_app",
        runtime=dpb.RuntimeOptions(working_dir=APPS))])
    wait_for(lambda: running(client, "peer"), 60, "RUNNING")
    proxy = start_proxy()
    wait_for(lambda: httpx.get(proxy.url + "/peer").status_code == 200, 30, "routes")
    assert httpx.get(proxy.url + "/peer").json() == {"client": "127.0.0.1", "scheme": "http"}
    elsewhere = httpx.HTTPTransport(local_address="127.0.0.2")  # not a trusted proxy
    with httpx.Client(transport=elsewhere) as other:
        spoofed = other.get(proxy.url + "/peer", headers={"x-forwarded-for": "6.6.6.6",
                                                          "x-forwarded-proto": "https"})
    assert spoofed.json() == {"client": "127.0.0.2", "scheme": "http"}
