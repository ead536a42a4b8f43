"""`servefleet logs` as a new user runs it, against a real controller, replica
and proxy: the deployment named as `servefleet replicas` prints it
(APPLICATION/NAME), and one request's lines with the traceback of the
error it met (text-format logs, the default)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from servefleet._private.cli.errors import UsageError
from servefleet._private.cli.query import deployment_named
from servefleet._private.testing import wait_for
from servefleet.v1 import deployment_pb2 as d

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def servefleet(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "SERVEFLEET_LOG_FORMAT"}
    return subprocess.run([sys.executable, "-m", "servefleet", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def test_deployment_is_a_name_or_application_slash_name() -> None:
    assert deployment_named("Front", None) == ("", "Front")
    assert deployment_named("Front", "iris") == ("iris", "Front")
    assert deployment_named("iris/Front", None) == ("iris", "Front")
    assert deployment_named("iris/Front", "iris") == ("iris", "Front")
    assert deployment_named(None, "iris") == ("iris", "")
    for bad in ("iris/", "/Front", "a/b/c"):
        with pytest.raises(UsageError, match="a name, or APPLICATION/NAME"):
            deployment_named(bad, None)
    with pytest.raises(UsageError, match="--app says 'other'"):
        deployment_named("iris/Front", "other")


def test_logs_of_application_slash_name_and_a_failed_requests_traceback(
        sqlite_fleet, served) -> None:
    client, start_proxy = served
    address = sqlite_fleet.addresses()[0]
    client.deploy(d.DeploymentSpec(name="Front", application="iris", route_prefix="/iris",
                                   import_path="echo_app:hello",
                                   runtime=d.RuntimeOptions(working_dir=APPS)))
    proxy = start_proxy()
    wait_for(lambda: httpx.get(proxy.url + "/iris").status_code == 200, 60, "Front serving")
    failed = httpx.get(proxy.url + "/iris", params={"fail": "1"},
                       headers={"x-request-id": "iris-fail-1"})
    assert failed.status_code == 500

    listed = servefleet("replicas", "--controller", address)
    assert " iris/Front " in listed.stdout, listed.stdout
    # The form it prints is the form it takes, as logs does.
    only = servefleet("replicas", "iris/Front", "--controller", address)
    assert only.returncode == 0 and " iris/Front " in only.stdout, only.stdout + only.stderr
    logs = servefleet("logs", "iris/Front", "--controller", address)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.startswith("Front-")

    def traceback() -> list[str] | None:
        found = servefleet("logs", "iris/Front", "--controller", address,
                           "--request-id", "iris-fail-1")
        assert found.returncode == 0, found.stderr
        lines = [line.split(" | ", 1)[1] for line in found.stdout.splitlines()]
        return lines if any("RuntimeError: told to fail" in x for x in lines) else None

    lines = wait_for(traceback, 15, "the failed request's traceback")
    assert "iris-fail-1" in lines[0] and "Traceback (most recent call last):" in lines
    assert any(line.strip().startswith('File "') and "echo_app.py" in line for line in lines)

    mismatch = servefleet("logs", "iris/Front", "--app", "other", "--controller", address)
    assert mismatch.returncode == 2 and "Traceback" not in mismatch.stderr
    assert "is in application 'iris', but --app says 'other'" in mismatch.stderr
