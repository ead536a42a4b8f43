"""`servefleet xds-bootstrap`: the JSON a proxyless gRPC client reads (pure, and
the command's errors)."""

from __future__ import annotations

import json
import subprocess
import sys

from servefleet._private.xds_bootstrap import bootstrap


def test_controllers_become_one_channel_or_servers_in_order() -> None:
    one = bootstrap(["127.0.0.1:7373", "127.0.0.1:7374"], node_id="n")
    assert [s["server_uri"] for s in one["xds_servers"]] == ["ipv4:127.0.0.1:7373,127.0.0.1:7374"]
    assert one["xds_servers"][0]["channel_creds"] == [{"type": "insecure"}]
    assert one["xds_servers"][0]["server_features"] == ["xds_v3"] and one["node"]["id"] == "n"
    named = bootstrap(["ctl-a:7373", "ctl-b:7373"])
    assert [s["server_uri"] for s in named["xds_servers"]] == ["ctl-a:7373", "ctl-b:7373"]
    assert named["node"]["id"]  # made up when not given
    tls = bootstrap(["127.0.0.1:7373", "127.0.0.1:7374"], ca="/c/ca.crt", cert="/c/a.crt",
                    key="/c/a.key")
    assert len(tls["xds_servers"]) == 2  # TLS checks each server's own name
    assert tls["xds_servers"][0]["channel_creds"] == [{"type": "tls", "config": {
        "ca_certificate_file": "/c/ca.crt", "certificate_file": "/c/a.crt",
        "private_key_file": "/c/a.key"}}]
    # The same files are the certificate provider xDS clusters of TLS replicas name.
    assert tls["certificate_providers"] == {"servefleet": {"plugin_name": "file_watcher",
        "config": {"certificate_file": "/c/a.crt", "private_key_file": "/c/a.key",
                   "ca_certificate_file": "/c/ca.crt", "refresh_interval": "600s"}}}
    assert "certificate_providers" not in one
    assert "certificate_providers" not in bootstrap(["a:1"], ca="/c/ca.crt")


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servefleet", "xds-bootstrap", *args],
                          capture_output=True, text=True, timeout=60)


def test_the_command_prints_json_and_names_bad_flags(tmp_path) -> None:
    out = run("--controller", "127.0.0.1:1,127.0.0.1:2", "--node-id", "me")
    assert out.returncode == 0 and json.loads(out.stdout)["node"]["id"] == "me"
    bad = run("--cert", str(tmp_path / "a.crt"), "--key", str(tmp_path / "a.key"))
    assert bad.returncode == 2 and "--cert needs --ca" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = run("--ca", str(tmp_path / "nope.crt"))
    assert missing.returncode == 2 and "nope.crt: no such file" in missing.stderr
