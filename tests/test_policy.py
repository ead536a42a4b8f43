"""What a deploy may run: the policy (pure) and its refusals by a real controller."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from test_controller_api import store_revision

from servefleet.client import ControllerClient, ControllerError
from servefleet.controller.errors import InvalidArgument, PermissionDenied
from servefleet.controller.goals.policy import DeployPolicy
from servefleet.testing import ControllerProcess
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d


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
                          ("servefleet.api:deployment", "servefleet itself"),
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
