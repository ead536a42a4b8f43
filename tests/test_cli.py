"""The servefleet command, run as a real process against a real controller."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from servefleet._private.cli.output import status_text
from servefleet._private.lifecycle import can_bind
from servefleet._private.testing import free_port, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import controller_pb2, status_pb2
from servefleet.v1 import deployment_pb2 as d


def servefleet(*args: str, env: dict | None = None, timeout: float = 60):
    return subprocess.run([sys.executable, "-m", "servefleet", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def one_clean_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


@pytest.fixture
def controller(fleet):
    (proc,) = fleet.start(1)
    fleet.leader()
    with ControllerClient(proc.address) as client:
        client.deploy(d.DeploymentSpec(name="Model", application="shop", import_path="m:C",
                                       route_prefix="/shop", version="v1"))
        client.deploy(d.DeploymentSpec(name="Old", import_path="m:C"))
        client.delete(["Old"])
    return proc


def test_status_text_and_json(controller) -> None:
    text = servefleet("status", "--controller", controller.address)
    assert text.returncode == 0, text.stderr
    assert "application shop: DEPLOYING" in text.stdout
    assert "Model: UPDATING, 0/1 running, version v1" in text.stdout
    as_json = servefleet("status", "--json", env={"SERVEFLEET_CONTROLLER": controller.address})
    assert as_json.returncode == 0, as_json.stderr
    reply = json.loads(as_json.stdout)
    assert reply["leader"] == controller.address
    (app,) = reply["applications"]
    (model,) = app["deployments"]
    assert model["name"] == "Model"
    # The same short status words as the text, and every field, zero or not.
    assert (app["status"], model["status"]) == ("DEPLOYING", "UPDATING")
    assert model["replica_states"] == {} and model["target_replicas"] == 1
    listed = json.loads(servefleet("replicas", "--json", "--controller",
                                   controller.address).stdout)
    assert listed == []


def test_status_text_shows_the_autoscaler_and_traffic() -> None:
    reply = controller_pb2.GetStatusResponse(cluster="c", leader="l:1", applications=[
        status_pb2.ApplicationStatusInfo(
            name="shop", status=status_pb2.APPLICATION_STATUS_RUNNING, deployments=[
            status_pb2.DeploymentStatusInfo(
                name="Model", status=status_pb2.DEPLOYMENT_STATUS_UPSCALING,
                target_replicas=4, replica_states={"RUNNING": 1, "STARTING": 3},
                autoscaling=status_pb2.AutoscalingStatus(
                    current_replicas=1, target_replicas=4, load=7.5, desired_replicas=4,
                    reason="up from 1 to 4: load 7.5", policy_error="p:f: boom"),
                traffic=status_pb2.TrafficStatus(requests_per_s=12.5, errors_per_s=0.5,
                                                 p50_ms=3.0, p99_ms=9.5))])])
    text = status_text(reply)
    assert "traffic: 12.5 req/s, 0.5 errors/s, p50 3.0 ms, p99 9.5 ms" in text
    assert "Model: UPSCALING, 1/4 running" in text
    assert ("autoscaling: load 7.5 asks for 4, target 4; last change: up from 1 to 4: "
            "load 7.5; POLICY ERROR: p:f: boom") in text


def test_list_and_delete(controller) -> None:
    listed = servefleet("list", "--controller", controller.address)
    assert listed.returncode == 0
    assert "shop/Model" in listed.stdout and "Old" not in listed.stdout
    everything = servefleet("list", "--all", "--json", "--controller", controller.address)
    names = {r["spec"]["name"]: r for r in json.loads(everything.stdout)}
    assert set(names) == {"Model", "Old"} and names["Old"]["deleted"]
    assert "end_time" in names["Old"]

    deleted = servefleet("delete", "--deployments", "Model", "Ghost", "--app", "shop",
                         "--controller", controller.address)
    assert deleted.returncode == 0
    assert deleted.stdout.splitlines() == ["deleted Model", "Ghost: not found, nothing to delete"]


def test_bad_input_to_a_call_is_one_line(controller) -> None:
    result = servefleet("delete", "bad/name", "--controller", controller.address)
    assert result.returncode == 1
    line = one_clean_line(result.stderr)
    assert line.startswith("servefleet delete: INVALID_ARGUMENT: names[0]:")


def test_output_into_a_closed_pipe_is_not_an_error(controller) -> None:
    shell = (f"{sys.executable} -m servefleet list --all --json "
             f"--controller {controller.address} | head -c1")
    result = subprocess.run(["bash", "-c", f"set -o pipefail; {shell}"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_no_controller_running_is_one_line_naming_the_addresses() -> None:
    # Every address refuses: said at once (not after --timeout), with what to do.
    addresses = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    result = servefleet("status", "--controller", addresses, timeout=12)
    assert result.returncode == 1
    line = one_clean_line(result.stderr)
    assert f"no controller is running at {addresses.replace(',', ', ')}" in line
    assert "servefleet up" in line


def test_a_controller_without_a_leader_is_waited_for() -> None:
    # It answers (its store is down, so nobody leads): the CLI keeps trying
    # until --timeout, then says no leader was reachable.
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "servefleet", "controller", "--store",
                             f"etcd://127.0.0.1:{free_port()}", "--listen", f"127.0.0.1:{port}"],
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: not can_bind(f"127.0.0.1:{port}"), 30, "the controller to listen")
        result = servefleet("status", "--controller", f"127.0.0.1:{port}", "--timeout", "3")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
    assert result.returncode == 1
    assert "no controller leader reachable" in one_clean_line(result.stderr)


@pytest.mark.parametrize(("args", "message"), [
    (["--store", "redis://x"], "unknown store URL"),
    (["--store", "sqlite://relative.db"], "bad sqlite URL"),
    (["--store", "etcd://host"], "bad etcd endpoint"),
    (["--store", "sqlite:///tmp/x.db", "--listen", "nohost"], "--listen"),
    (["--store", "sqlite:///tmp/x.db", "--lease-ttl", "0"], "--lease-ttl"),
    (["--store", "sqlite:///tmp/x.db", "--cluster", "a/b"], "--cluster"),
    (["--store", "sqlite:///tmp/x.db", "--cluster", "a\n"], "--cluster"),
])
def test_controller_usage_errors(args: list[str], message: str) -> None:
    result = servefleet("controller", *args)
    assert result.returncode == 2
    assert message in one_clean_line(result.stderr)


@pytest.mark.parametrize(("args", "message"), [
    (["proxy", "--workers", "0"], "--workers"),
    (["up", "--proxy-workers", "65"], "--proxy-workers"),
    (["proxy", "--forwarded-allow-ips", "10.0.0.0/8,lb"],
     "--forwarded-allow-ips: 'lb' is not an IP address or network"),
])
def test_worker_counts_are_bounded(args: list[str], message: str) -> None:
    result = servefleet(*args)
    assert result.returncode == 2
    assert message in one_clean_line(result.stderr)


@pytest.mark.parametrize("timeout", ["nan", "0", "-1", "inf"])
def test_bad_timeout_is_a_usage_error(timeout: str) -> None:
    result = servefleet("status", "--timeout", timeout)
    assert result.returncode == 2
    assert "--timeout" in one_clean_line(result.stderr)


def test_controller_on_an_unusable_sqlite_file(tmp_path) -> None:
    garbage = tmp_path / "state.db"
    garbage.write_bytes(b"not a database" * 200)
    result = servefleet("controller", "--store", f"sqlite://{garbage}",
                        "--listen", f"127.0.0.1:{free_port()}", timeout=30)
    assert result.returncode == 1
    assert "cannot use" in one_clean_line(result.stderr)


def test_controller_port_in_use(tmp_path) -> None:
    port = free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        result = servefleet("controller", "--store", f"sqlite://{tmp_path}/s.db",
                            "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert "cannot listen on" in one_clean_line(result.stderr)


def test_controller_stops_on_sigterm_even_without_its_store() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "servefleet", "controller", "--store",
                             f"etcd://127.0.0.1:{free_port()}", "--listen", f"127.0.0.1:{port}"],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # until it is campaigning against the missing store
        seen.append(line)
        if "store unavailable while campaigning" in line:
            break
    proc.send_signal(signal.SIGTERM)
    _, rest = proc.communicate(timeout=15)
    stderr = "".join(seen) + rest
    assert proc.returncode == 0
    assert "Traceback" not in stderr and "controller stopped" in stderr
