"""No poison pills: whatever the store holds, a controller starts, leads and
serves. Records it cannot use are set aside as DEPLOY_FAILED with the reason;
the others are loaded and their replicas adopted (real processes, crafted
records written straight into the store, as an older or buggy version could)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.store import Put
from servefleet.controller.store.sqlite import SqliteStore
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import records_pb2, status_pb2

pytestmark = pytest.mark.slow
APPS = str(Path(__file__).parent / "apps")
DS = status_pb2.DeploymentStatus


def echo(name: str, **fields) -> dpb.DeploymentSpec:
    return dpb.DeploymentSpec(name=name, application="default", import_path="echo_app:Echo",
                              runtime=dpb.RuntimeOptions(working_dir=APPS),
                              replica_config=dpb.ReplicaConfig(num_replicas=1), **fields)


def write(db: Path, cluster: str, items: dict[str, bytes]) -> None:
    async def put() -> None:
        store = SqliteStore(db)
        try:
            await store.txn([], [Put(key, value) for key, value in items.items()])
        finally:
            await store.close()
    asyncio.run(put())


def statuses(client: ControllerClient) -> dict[str, tuple[int, str]]:
    """By "app/deployment", or by "app" for an application without deployments."""
    out: dict[str, tuple[int, str]] = {}
    for app in client.status().applications:
        if not app.deployments:
            out[app.name] = (app.status, app.message)
        for dep in app.deployments:
            out[f"{app.name}/{dep.name}"] = (dep.status, dep.message)
    return out


def test_a_controller_leads_whatever_the_store_holds(tmp_path, cluster) -> None:
    db = tmp_path / "state.db"
    args = ["--allow-working-dir", "/"]
    first = ControllerProcess(f"sqlite://{db}", cluster=cluster, log_dir=tmp_path,
                              extra_args=args).start()
    with ControllerClient([first.address], timeout=30) as client:
        client.deploy(echo("Good"))
        wait_for(lambda: statuses(client).get("default/Good", (0,))[0]
                 == DS.DEPLOYMENT_STATUS_HEALTHY, 60, "Good healthy")
        (good,) = [r.record.replica_id for r in client.replicas()]
    first.stop()

    keys = ClusterKeys(cluster)
    gadget = tmp_path / "gadget"
    gadget.mkdir()
    (gadget / "model.py").write_text("import asyncio\n")
    exits = echo("Exits")
    exits.runtime.working_dir = str(gadget)
    exits.replica_config.ClearField("num_replicas")
    exits.replica_config.autoscaling_config.CopyFrom(dpb.AutoscalingConfig(
        min_replicas=0, max_replicas=1, policy="model:asyncio.base_events.sys.exit"))
    other = records_pb2.DeploymentRecord(spec=echo("SomeoneElse"))
    invalid = records_pb2.DeploymentRecord(spec=echo("Invalid", route_prefix="no-slash"))
    write(db, cluster, {
        keys.deployment("default", "Garbage"): b"\xff\xfe\x00 not a record",
        keys.deployment("default", "Mismatch"): other.SerializeToString(),
        keys.deployment("default", "Invalid"): invalid.SerializeToString(),
        keys.deployments + "default/too/deep": b"",
        keys.application("broken"): b"\x0a\xff\xff\xff garbage",
        keys.replica("default", "Good", "Good-forged"): b"\xff garbage",
        # The probe's poison pill: a policy that walked into sys.exit, which
        # the controller imported and ran. Now it runs, and fails, elsewhere.
        keys.deployment("default", "Exits"): records_pb2.DeploymentRecord(
            spec=exits).SerializeToString(),
    })

    second = ControllerProcess(f"sqlite://{db}", cluster=cluster, log_dir=tmp_path,
                               extra_args=args).start()
    try:
        with ControllerClient([second.address], timeout=30) as client:
            wait_for(lambda: statuses(client).get("default/Good", (0,))[0]
                     == DS.DEPLOYMENT_STATUS_HEALTHY, 60, "Good adopted")
            assert [r.record.replica_id for r in client.replicas()] == [good]  # not restarted
            seen = statuses(client)
            for name, reason in [("default/Garbage", "unreadable"),
                                 ("default/Mismatch", "not the deployment its key names"),
                                 ("default/Invalid", "spec.route_prefix: must start with '/'"),
                                 ("default/too/deep", "not deployments/<app>/<name>"),
                                 ("broken", "unreadable")]:
                status, message = seen[name]
                assert status in (DS.DEPLOYMENT_STATUS_DEPLOY_FAILED,
                                  status_pb2.APPLICATION_STATUS_DEPLOY_FAILED), (name, seen)
                assert "cannot be used" in message and reason in message, (name, message)
            wait_for(lambda: "model:asyncio is a module" in next(
                d.autoscaling.policy_error for a in client.status().applications
                for d in a.deployments if d.name == "Exits"), 30, "the policy refused")
            time.sleep(3)  # it keeps leading
            assert second.proc.poll() is None and second.is_leader()

            # Deploying the name replaces the record; deleting removes it.
            client.deploy(echo("Invalid", route_prefix="/fixed"))
            wait_for(lambda: statuses(client)["default/Invalid"][0]
                     == DS.DEPLOYMENT_STATUS_HEALTHY, 60, "the replaced record to serve")
            assert client.delete(["Garbage"]) == ["Garbage"]
            assert "default/Garbage" not in statuses(client)
            assert client.delete_applications(["broken"]) == ["broken"]
            assert "broken" not in statuses(client)
            client.deploy_applications([apb.ApplicationSpec(
                name="broken", import_path="echo_app:hello", route_prefix="/hello",
                runtime=dpb.RuntimeOptions(working_dir=APPS))], partial=True)
    finally:
        with ControllerClient([second.address], timeout=30) as client:
            client.shutdown()
        second.stop()
    assert "Traceback" not in second.logs()
