"""Import paths name user code and nothing else: the deploy policy's checks of
the files (pure, with tmp dirs), the resolver that every import of user code
goes through (in this process), and a real controller refusing the gadgets an
attacker with a deployer token tried, writing nothing."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

import grpc
import pytest
from test_controller_api import store_revision

from servefleet.client import ControllerClient, ControllerError
from servefleet.controller.errors import PermissionDenied
from servefleet.controller.goals.policy import DeployPolicy
from servefleet.testing import ControllerProcess
from servefleet.user_code import UserCodeError, import_user_object
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d

MODEL = """
import asyncio
import functools
import subprocess
from os import system
from subprocess import Popen

from HELPERS import Helper
from servefleet import deployment

run = subprocess.run
partly = functools.partial(print, "x")


class App:
    def build(self):
        return 1


def builder(args):
    return served.bind()


@deployment
class Served:
    pass


served = Served
app = Served.bind()
"""


@pytest.fixture
def code(tmp_path: Path) -> Path:
    root = tmp_path / "code"
    root.mkdir()
    name = f"sf_model_{os.getpid()}_{len(list(tmp_path.parent.iterdir()))}"
    (root / f"{name}.py").write_text(MODEL.replace("HELPERS", f"{name}_helpers"))
    (root / f"{name}_helpers.py").write_text("class Helper:\n    pass\n")
    (root / "module_name").write_text(name)
    return root


@pytest.mark.parametrize("attribute", ["asyncio", "asyncio.base_events.subprocess.Popen",
                                       "subprocess.getoutput", "Popen", "system", "run",
                                       "App.build.__globals__"])
def test_the_resolver_refuses_walks_out_of_user_code(code: Path, attribute: str) -> None:
    module = (code / "module_name").read_text()
    with pytest.raises(UserCodeError, match=r"import path names user code|Python's own"):
        import_user_object(f"{module}:{attribute}", str(code))


@pytest.mark.parametrize("attribute", ["App", "App.build", "builder", "Served", "served",
                                       "app", "Helper", "partly"])
def test_the_resolver_takes_what_the_user_wrote(code: Path, attribute: str) -> None:
    module = (code / "module_name").read_text()
    assert import_user_object(f"{module}:{attribute}", str(code)) is not None


def strict(root: Path, **kw) -> DeployPolicy:
    return DeployPolicy.build(loopback=False, cwd=str(root), default_image="sf:1",
                              working_dirs=[str(root)], **kw)


def test_the_policy_refuses_walks_links_and_installed_code(code: Path) -> None:
    module = (code / "module_name").read_text()
    policy = strict(code)
    policy.check_import("p", f"{module}:App", str(code))
    for path, words in [(f"{module}:asyncio.base_events.subprocess.Popen", "walks through"),
                        (f"{module}:subprocess.getoutput", "walks through"),
                        ("os:system", "standard library"),
                        ("psutil:subprocess.getoutput", "not installed packages")]:
        with pytest.raises(PermissionDenied, match=words):
            policy.check_import("p", path, str(code))
    # A link in the working dir to the standard library is found through, and refused.
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    os.symlink(stdlib / "json", code / "jsonlink")
    os.symlink(stdlib / "shlex.py", code / "shlexlink.py")
    for path in ("jsonlink:loads", "shlexlink:split"):
        with pytest.raises(PermissionDenied, match="through a link"):
            policy.check_import("p", path, str(code))
    # A virtualenv below the working dir is installed code, unless named.
    venv = code / "venv" / "lib" / "python3" / "site-packages"
    venv.mkdir(parents=True)
    (code / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "sneaky.py").write_text("def f(): ...\n")
    for where, path in ((str(venv), "sneaky:f"),):
        with pytest.raises(PermissionDenied, match="installed code"):
            strict(code).check_import("p", path, where)
        strict(code, packages_below=[str(code / "venv")]).check_import("p", path, where)
    # The walk rule holds however wide the roots are.
    anywhere = DeployPolicy.build(loopback=True, cwd="/", default_image="sf:1",
                                  working_dirs=["/"])
    with pytest.raises(PermissionDenied, match="walks through"):
        anywhere.check_import("p", f"{module}:asyncio.subprocess.Popen", str(code))


def test_every_import_path_of_a_spec_is_checked(code: Path) -> None:
    policy = strict(code)
    helpers = (code / "module_name").read_text() + "_helpers:Helper"
    spec = d.DeploymentSpec(name="m", import_path=helpers,
                            runtime=d.RuntimeOptions(working_dir=str(code)))
    spec.replica_config.autoscaling_config.policy = "os:system"
    with pytest.raises(PermissionDenied, match=r"^spec.replica_config.autoscaling_config"
                                              r".policy: 'os:system' names the standard"):
        policy.check_deployment("spec", spec)
    app = apb.ApplicationSpec(name="a", import_path=helpers,
                              runtime=d.RuntimeOptions(working_dir=str(code)),
                              deployments=[apb.DeploymentOverride(name="m")])
    app.deployments[0].replica_config.autoscaling_config.policy = "subprocess:run"
    with pytest.raises(PermissionDenied, match=r"applications\[0\]\.deployments\[0\]"):
        policy.check_application("applications[0]", app)


@pytest.mark.slow
def test_a_controller_refuses_the_gadgets_and_writes_nothing(code: Path, tmp_path: Path,
                                                             cluster: str) -> None:
    module = (code / "module_name").read_text()
    os.symlink(Path(sysconfig.get_paths()["stdlib"]) / "json", code / "jsonlink")
    url = f"sqlite://{tmp_path}/state.db"
    controller = ControllerProcess(url, cluster=cluster, runtime="process", log_dir=tmp_path,
                                   extra_args=["--allow-working-dir", str(code),
                                               "--no-allow-env"]).start()
    runtime = d.RuntimeOptions(working_dir=str(code))
    gadgets = [
        (d.DeploymentSpec(name="g", import_path=f"{module}:asyncio.base_events.subprocess.Popen",
                          init_args_json=f'[["sh", "-c", "touch {tmp_path}/pwned"]]',
                          runtime=runtime),
         "spec.import_path"),
        (d.DeploymentSpec(name="g", import_path="jsonlink:loads", runtime=runtime),
         "spec.import_path"),
        (d.DeploymentSpec(name="g", import_path=f"{module}:App", runtime=runtime,
                          replica_config=d.ReplicaConfig(autoscaling_config=d.AutoscalingConfig(
                              max_replicas=1, policy="os:system"))),
         "spec.replica_config.autoscaling_config.policy"),
    ]
    builders = [f"{module}:asyncio.base_events.subprocess.getoutput",
                "psutil:subprocess.getoutput"]
    try:
        with ControllerClient([controller.address], timeout=20) as client:
            client.status()
            before = store_revision(url)
            for spec, field in gadgets:
                with pytest.raises(ControllerError) as refused:
                    client.deploy(spec)
                assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED, refused.value
                assert refused.value.details.startswith(field + ": "), refused.value.details
            for builder in builders:
                with pytest.raises(ControllerError) as refused:
                    client.deploy_applications([apb.ApplicationSpec(
                        name="b", import_path=builder,
                        args_json=f'{{"cmd": "touch {tmp_path}/pwned"}}', runtime=runtime)])
                assert refused.value.code == grpc.StatusCode.PERMISSION_DENIED
                assert refused.value.details.startswith("applications[0].import_path: ")
            assert store_revision(url) == before
            client.shutdown()
    finally:
        controller.stop()
    assert not (tmp_path / "pwned").exists()
