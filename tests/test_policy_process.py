"""Custom autoscaling policies run outside the controller (real processes).

Module-level code of a policy's module runs in a process of its own, without
the controller's credentials; a policy that exits takes down only its own
process: the controller leads on, the deployment reports the failure, and the
built-in policy decides."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import deployment_pb2 as dpb

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
PROBE = """
import json, os
with open({marker!r}, "w") as f:
    json.dump({{"pid": os.getpid(), "ppid": os.getppid(), "env": sorted(os.environ)}}, f)

def two(context):
    return 2

def exits(context):
    os._exit(7)
"""


def spec(working_dir: str, policy: str) -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(
        name="Scaled", import_path="echo_app:Echo",
        runtime=dpb.RuntimeOptions(working_dir=working_dir, env={"ECHO": "1"}),
        replica_config=dpb.ReplicaConfig(autoscaling_config=dpb.AutoscalingConfig(
            min_replicas=1, max_replicas=3, upscale_delay_s=0, downscale_delay_s=0,
            policy=policy)))


def autoscaling(client: ControllerClient):
    (app,) = client.status().applications
    return app.deployments[0]


def test_a_policy_runs_in_its_own_process_and_its_exit_is_only_its_own(
        tmp_path, cluster, monkeypatch) -> None:
    code = tmp_path / "code"
    code.mkdir()
    marker = tmp_path / "ran.json"
    (code / "sf_probe_policy.py").write_text(PROBE.format(marker=str(marker)))
    (code / "echo_app.py").write_text(Path(APPS, "echo_app.py").read_text())
    monkeypatch.setenv("SERVEFLEET_TOKEN", "sft_the_controllers_own")  # never the policy's
    controller = ControllerProcess(f"sqlite://{tmp_path}/state.db", cluster=cluster,
                                   log_dir=tmp_path, extra_args=["--allow-working-dir", "/"])
    controller.start()
    monkeypatch.delenv("SERVEFLEET_TOKEN")
    try:
        with ControllerClient([controller.address], timeout=30) as client:
            client.deploy(spec(str(code), "sf_probe_policy:two"))
            wait_for(lambda: autoscaling(client).target_replicas == 2, 60,
                     "the policy's answer")
            ran = json.loads(marker.read_text())
            assert ran["pid"] != controller.proc.pid and ran["ppid"] == controller.proc.pid
            assert "SERVEFLEET_TOKEN" not in ran["env"] and "ECHO" in ran["env"]
            assert autoscaling(client).autoscaling.policy_error == ""

            client.deploy(spec(str(code), "sf_probe_policy:exits"))
            wait_for(lambda: "exited with code 7" in
                     autoscaling(client).autoscaling.policy_error, 60, "the failure reported")
            # The built-in policy decides instead: no load asks for min_replicas.
            wait_for(lambda: autoscaling(client).target_replicas == 1, 30, "the built-in count")
            time.sleep(2)
            assert controller.proc.poll() is None and controller.is_leader()
            client.shutdown()
    finally:
        controller.stop()
    assert "Traceback" not in controller.logs()
    assert os.path.exists(marker)
