"""What a deploy may run: the policy (pure) and its refusals by a real controller."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import pytest
from test_controller_api import store_revision

from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient, ControllerError
from servefleet.controller.errors import InvalidArgument, PermissionDenied
from servefleet.controller.goals.policy import DeployPolicy
from servefleet.controller.keys import ClusterKeys
from servefleet.controller.store import Put, open_store
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d
from servefleet.v1 import status_pb2


def test_defaults_depend_on_listening_on_loopback(tmp_path: Path) -> None:
    local = DeployPolicy.build(loopback=True, cwd=str(tmp_path), default_image="sf:1")
    local.check("r", d.RuntimeOptions(working_dir=str(tmp_path / "code"), env={"A": "1"},
                                      image="sf:1"))
    for runtime, message in [
        (d.RuntimeOptions(working_dir="/etc"), "r.working_dir: '/etc' is outside"),
        (d.RuntimeOptions(working_dir=f"{tmp_path}/../x"), "is outside"),
        (d.RuntimeOptions(working_dir=f"{tmp_path}x"), "is outside"),  # a sibling, not below
        (d.RuntimeOptions(image="evil:latest"), "r.image: 'evil:latest' matches no allowed"),
    ]:
        with pytest.raises(PermissionDenied, match=message):
            local.check("r", runtime)
    remote = DeployPolicy.build(loopback=False, cwd=str(tmp_path), default_image="sf:1")
    with pytest.raises(PermissionDenied, match="takes no working dirs"):
        remote.check("r", d.RuntimeOptions(working_dir=str(tmp_path)))
    with pytest.raises(PermissionDenied, match=r"r\.env: .*--allow-env"):
        remote.check("r", d.RuntimeOptions(env={"LD_PRELOAD": "/tmp/x.so"}))


def test_import_paths_name_user_code(tmp_path: Path) -> None:
    (tmp_path / "model.py").write_text("x = 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub.py").write_text("class App: ...\n")
    strict = DeployPolicy.build(loopback=True, cwd=str(tmp_path), default_image="sf:1")
    strict.check_import("p", "model:App", "")  # the controller's directory
    strict.check_import("p", "pkg.sub:App", str(tmp_path))
    for path, message in [("os:system", "standard library"),
                          ("subprocess:Popen", "standard library"),
                          ("servefleet._private.applications.api:deployment", "servefleet itself"),
                          ("yaml:load", "is not a file or package")]:
        with pytest.raises(PermissionDenied, match=message):
            strict.check_import("p", path, str(tmp_path))
    # A module that exists nowhere is a mistake to point out, not a policy matter.
    with pytest.raises(InvalidArgument, match=f"p: no module 'modle' in '{tmp_path}', where "
                                              "'modle:App' is looked for"):
        strict.check_import("p", "modle:App", str(tmp_path))
    anywhere = DeployPolicy.build(loopback=True, cwd=str(tmp_path), default_image="sf:1",
                                  working_dirs=["/"])
    anywhere.check_import("p", "yaml:load", "")  # --allow-working-dir /: trusted
    with pytest.raises(PermissionDenied, match="standard library"):
        anywhere.check_import("p", "subprocess:Popen", "")
    in_image = DeployPolicy.build(loopback=False, cwd="/", default_image="sf:1",
                                  working_dirs=["/opt/models"], code_on_host=False)
    in_image.check_import("p", "model:App", "/opt/models")  # not on this host to check


def test_flags_replace_the_defaults_and_symlinks_are_resolved(tmp_path: Path) -> None:
    allowed, outside = tmp_path / "models", tmp_path / "secrets"
    allowed.mkdir()
    outside.mkdir()
    (allowed / "link").symlink_to(outside)
    policy = DeployPolicy.build(loopback=False, cwd="/", default_image="sf:1",
                                working_dirs=[str(allowed)], images=["registry:5000/team/*"],
                                allow_env=True)
    policy.check("r", d.RuntimeOptions(working_dir=str(allowed / "a"), env={"A": "1"},
                                       image="registry:5000/team/model:v2"))
    with pytest.raises(PermissionDenied, match="is outside"):
        policy.check("r", d.RuntimeOptions(working_dir=str(allowed / "link")))
    with pytest.raises(PermissionDenied, match="matches no allowed image"):
        policy.check("r", d.RuntimeOptions(image="sf:1"))


def test_a_controller_refuses_specs_outside_its_policy_and_writes_nothing(
        tmp_path: Path, cluster: str) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "m.py").write_text("def app(request):\n    return 'ok'\n")
    url = f"sqlite://{tmp_path}/state.db"
    controller = ControllerProcess(url, cluster=cluster, runtime="none", log_dir=tmp_path,
                                   extra_args=["--allow-working-dir", str(code),
                                               "--allow-image", "servefleet:*",
                                               "--no-allow-env"]).start()
    try:
        with ControllerClient([controller.address], timeout=10) as client:
            client.status()
            before = store_revision(url)
            cases = [
                (d.RuntimeOptions(working_dir=os.path.dirname(__file__)),
                 "spec.runtime.working_dir"),
                (d.RuntimeOptions(image="ubuntu:24.04"), "spec.runtime.image"),
                (d.RuntimeOptions(env={"A": "1"}), "spec.runtime.env"),
            ]
            for runtime, field in cases:
                with pytest.raises(ControllerError) as refused:
                    client.deploy(d.DeploymentSpec(name="M", import_path="m:app",
                                                   runtime=runtime))
                assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
                assert refused.value.details.startswith(field)
            # (Installed packages are refused too when replicas run on this host:
            # test_import_paths_name_user_code; this controller runs none.)
            for import_path, field in (("subprocess:Popen", "standard library"),):
                with pytest.raises(ControllerError, match=field) as refused:
                    client.deploy(d.DeploymentSpec(name="M", import_path=import_path,
                                                   runtime=d.RuntimeOptions(
                                                       working_dir=str(code))))
                assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
                assert refused.value.details.startswith("spec.import_path: ")
            # gRPC servicer functions are user code too: the same rule.
            with pytest.raises(ControllerError, match="standard library") as refused:
                client.deploy(d.DeploymentSpec(
                    name="M", import_path="m:app", grpc_servicer_functions=["os:system"],
                    runtime=d.RuntimeOptions(working_dir=str(code))))
            assert refused.value.details.startswith("spec.grpc_servicer_functions[0]: ")
            with pytest.raises(ControllerError, match="standard library") as refused:
                client.deploy_applications([apb.ApplicationSpec(
                    name="g", import_path="m:app", grpc_servicer_functions=["m:f", "os:system"],
                    runtime=d.RuntimeOptions(working_dir=str(code)))])
            assert refused.value.details.startswith("applications[0].grpc_servicer_functions[1]")
            app = apb.ApplicationSpec(name="a", import_path="m:app",
                                      runtime=d.RuntimeOptions(working_dir=str(code)),
                                      deployments=[apb.DeploymentOverride(
                                          name="M", runtime=d.RuntimeOptions(env={"A": "1"}))])
            with pytest.raises(ControllerError, match=r"applications\[0\]\.deployments\[0\]"):
                client.deploy_applications([app])
            assert store_revision(url) == before
            client.deploy(d.DeploymentSpec(name="M", import_path="m:app",
                                           runtime=d.RuntimeOptions(working_dir=str(code),
                                                                    image="servefleet:2")))
            assert store_revision(url) > before
    finally:
        controller.stop()


def test_a_controller_without_a_runtime_runs_no_user_code(tmp_path: Path, cluster: str) -> None:
    """--runtime none: no build and no custom policy from a spec runs on the
    controller's host (each module would leave a file when imported)."""
    code = tmp_path / "code"
    code.mkdir()
    ran = tmp_path / "ran"
    for module, function in (("builder_app", "def build(args):\n    pass\n"),
                             ("policies", "def decide(context):\n    return 1\n")):
        (code / f"{module}.py").write_text(f"import os\nos.makedirs({str(ran)!r}, exist_ok=True)\n"
                                           f"open(os.path.join({str(ran)!r}, {module!r}), 'w')"
                                           f".close()\n\n\n{function}")
    runtime = d.RuntimeOptions(working_dir=str(code))
    url = f"sqlite://{tmp_path}/state.db"
    # An application already in the store (written by a controller that had a
    # runtime) is not built here either.
    stored = apb.ApplicationRecord(spec=apb.ApplicationSpec(
        name="stored", import_path="builder_app:build", runtime=runtime), generation=1)
    write(url, ClusterKeys(cluster).application("stored"), stored.SerializeToString())
    controller = ControllerProcess(url, cluster=cluster, runtime="none", log_dir=tmp_path,
                                   extra_args=["--allow-working-dir", str(code)]).start()
    try:
        with ControllerClient([controller.address], timeout=10) as client:
            wait_for(lambda: "not built" in (client.application_status("stored") or
                                             status_pb2.ApplicationStatusInfo()).message,
                     30, "the stored application failed, unbuilt")
            before = store_revision(url)
            with pytest.raises(ControllerError) as refused:
                client.deploy_applications([apb.ApplicationSpec(
                    name="b", import_path="builder_app:build", runtime=runtime)])
            assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert "runs no user code (--runtime none)" in refused.value.details
            with pytest.raises(ControllerError) as refused:
                client.deploy(d.DeploymentSpec(
                    name="p", import_path="policies:decide", runtime=runtime,
                    replica_config=d.ReplicaConfig(autoscaling_config=d.AutoscalingConfig(
                        max_replicas=2, policy="policies:decide"))))
            assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
            assert refused.value.details.startswith(
                "spec.replica_config.autoscaling_config.policy: this controller runs no user code")
            assert store_revision(url) == before
            client.deploy(d.DeploymentSpec(name="p", import_path="policies:decide",
                                           runtime=runtime))  # stored, run nowhere
    finally:
        controller.stop()
    assert not ran.exists(), os.listdir(ran)


def write(url: str, key: str, value: bytes) -> None:
    async def put() -> None:
        store = open_store(url)
        try:
            await store.txn([], [Put(key, value)])
        finally:
            await store.close()
    asyncio.run(put())
