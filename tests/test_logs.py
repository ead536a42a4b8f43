"""JSON log lines: one request's id in the proxy's and the replica's logs
(user code's own lines included), with real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from servefleet._private.testing import ControllerProcess, ProxyProcess, stop_cluster, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")


def json_lines(text: str) -> list[dict]:
    found = []
    for line in text.splitlines():
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


def check_servefleet_logs(client: ControllerClient, controller: ControllerProcess,
                          proxy: ProxyProcess, replica_id: str) -> None:
    """`servefleet logs` (the GetLogs stream): past lines, then followed ones. A
    deployment is found by its name alone, in whichever application has it."""
    out = subprocess.run([sys.executable, "-m", "servefleet", "logs", "Chatty", "--controller",
                          controller.address, "--tail", "50"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert any(line.startswith(f"{replica_id} | ") and "user code heard hello" in line
               for line in out.stdout.splitlines())
    missing = subprocess.run([sys.executable, "-m", "servefleet", "logs", "Nobody",
                              "--controller", controller.address], capture_output=True,
                             text=True, timeout=30)
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr
    assert "Traceback" not in missing.stderr

    seen: list[str] = []
    stream = client.logs(deployment="Chatty", tail_lines=1, follow=True)

    def follow() -> None:
        for chunk in stream:
            seen.extend(chunk.lines)
            if any("followed" in line for line in seen):
                return

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    time.sleep(1)
    assert httpx.get(proxy.url + "/chat", params={"q": "followed"}).text == "ok"
    reader.join(15)
    assert not reader.is_alive(), seen[-5:]
    stream.close()  # cancels the GetLogs stream

    # The same name in a second application: which one must be said.
    client.deploy(d.DeploymentSpec(name="Chatty", application="other",
                                   import_path="chatty_app:chatty",
                                   runtime=d.RuntimeOptions(working_dir=APPS),
                                   replica_config=d.ReplicaConfig(num_replicas=0)))
    both = subprocess.run([sys.executable, "-m", "servefleet", "logs", "Chatty", "--controller",
                           controller.address], capture_output=True, text=True, timeout=30)
    assert both.returncode == 1 and "INVALID_ARGUMENT" in both.stderr
    assert "in several applications (other, talk)" in both.stderr
    named = subprocess.run([sys.executable, "-m", "servefleet", "logs", "Chatty", "--app",
                            "talk", "--controller", controller.address, "--tail", "50"],
                           capture_output=True, text=True, timeout=30)
    assert named.returncode == 0 and "user code heard hello" in named.stdout


def test_a_request_id_is_found_in_the_proxy_and_replica_json_logs(tmp_path, cluster,
                                                                 monkeypatch) -> None:
    monkeypatch.setenv("SERVEFLEET_LOG_FORMAT", "json")  # the processes below inherit it
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path).start()
    proxy = ProxyProcess([controller.address], log_dir=tmp_path, extra_args=["--access-log"])
    client = ControllerClient([controller.address], timeout=30)
    try:
        client.deploy(d.DeploymentSpec(name="Chatty", application="talk",
                                       import_path="chatty_app:chatty", route_prefix="/chat",
                                       runtime=d.RuntimeOptions(working_dir=APPS)))
        wait_for(lambda: any(dep.status == status_pb2.DEPLOYMENT_STATUS_HEALTHY
                             for app in client.status().applications
                             for dep in app.deployments), 60, "Chatty healthy")
        proxy.start()
        wait_for(lambda: httpx.get(proxy.url + "/chat").status_code == 200, 30, "routed")
        request_id = uuid.uuid4().hex
        assert httpx.get(proxy.url + "/chat", params={"q": "hello"},
                         headers={"x-request-id": request_id}).text == "ok"
        (replica,) = client.replicas(deployment="Chatty")
        log = Path(controller.runtime_dir) / cluster / f"{replica.record.replica_id}.log"

        def users_line() -> dict | None:
            return next((e for e in json_lines(log.read_text())
                         if e.get("logger") == "chatty" and "hello" in e["message"]), None)

        line = wait_for(users_line, 10, "the user's log line")
        assert line["request_id"] == request_id
        assert line["message"] == "user code heard hello"
        assert (line["component"], line["application"], line["deployment"],
                line["replica"]) == ("replica", "talk", "Chatty",
                                     replica.record.replica_id)
        assert line["level"] == "WARNING" and line["time"].endswith("Z")
        at_proxy = [e for e in json_lines(proxy.logs()) if e.get("request_id") == request_id]
        assert [(e["component"], e["logger"]) for e in at_proxy] == [
            ("proxy", "servefleet.proxy.access")]
        assert at_proxy[0]["message"].startswith("GET /chat 200 ")
        controller_lines = json_lines(controller.logs())
        assert controller_lines and all(e["component"] == "controller"
                                        for e in controller_lines)
        # What it did as leader carries its term: the fencing revision it won.
        elected = next(e for e in controller_lines if e["message"].startswith("elected leader"))
        revision = int(elected["message"].split("fencing revision ")[1].split()[0])
        started = next(e for e in controller_lines if e["message"].startswith(
            f"started replica {replica.record.replica_id}"))
        assert started["term"] == revision > 0
        check_servefleet_logs(client, controller, proxy, replica.record.replica_id)
    finally:
        stop_cluster(controller, client, [proxy])


def test_request_ids_are_unique_hex_and_differ_in_a_forked_child() -> None:
    import os

    from servefleet._private.observability.logs import new_request_id

    ids = [new_request_id() for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a forked replica must not repeat its parent's ids
        os.write(write, new_request_id().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert child[:12] != ids[0][:12] and child not in ids
