"""Import paths name user code and nothing else: the resolver every import of
user code goes through (in this process), the deploy policy's checks of the
files (pure, with tmp dirs), and a real controller refusing the gadgets an
attacker with a deployer token tried, writing nothing."""

from __future__ import annotations

import sys
import sysconfig
import uuid
from pathlib import Path

import grpc
import pytest
from test_controller_api import store_revision

from servefleet._private.applications.user_code import UserCodeError, import_user_object
from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient, ControllerError
from servefleet.controller.errors import FailedPrecondition, PermissionDenied
from servefleet.controller.goals.policy import DeployPolicy
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d

STDLIB = Path(sysconfig.get_paths()["stdlib"])
MODEL = """
import asyncio
import functools
import string
import subprocess
from os import path
from subprocess import Popen

from HELPERS import Helper
from servefleet import deployment

run = subprocess.run
sp = subprocess  # a module under a name its source binds by assignment
partly = functools.partial(print, "x")


class App:
    def build(self):
        return 1


class string:  # the module's own, though it also imports a module of that name
    def upper(self):
        return "A"


def builder(args):
    return served.bind()


@deployment
class Served:
    pass


served = Served
app = Served.bind()
inst = App()
wrapped = deployment(Popen)
"""


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working dir with a module (named `module_name` says: modules stay
    imported, so each test has its own), its helper and a package."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the resolver prepends working dirs
    root = tmp_path / "code"
    root.mkdir()
    name = f"sf_model_{uuid.uuid4().hex[:12]}"
    (root / f"{name}.py").write_text(MODEL.replace("HELPERS", f"{name}_helpers"))
    (root / f"{name}_helpers.py").write_text("class Helper:\n    pass\n")
    (root / f"{name}_pkg").mkdir()
    (root / f"{name}_pkg" / "__init__.py").write_text("from .sub import Thing\n")
    (root / f"{name}_pkg" / "sub.py").write_text("class Thing:\n    pass\n")
    (root / "module_name").write_text(name)
    return root


def named(code: Path) -> str:
    return (code / "module_name").read_text()


@pytest.mark.parametrize("attribute", [
    "asyncio", "asyncio.base_events.subprocess.Popen", "subprocess.getoutput", "Popen", "run",
    "sp.Popen", "path.join", "Helper", "partly.func", "wrapped", "App.build.__globals__",
    "App.mro"])
def test_the_resolver_refuses_walks_out_of_user_code(code: Path, attribute: str) -> None:
    with pytest.raises(UserCodeError, match=r"not a walk into other modules|Python's own"):
        import_user_object(f"{named(code)}:{attribute}", str(code))


@pytest.mark.parametrize("path", [
    "{m}:App", "{m}:App.build", "{m}:builder", "{m}:Served", "{m}:served", "{m}:app",
    "{m}:partly", "{m}:inst", "{m}:inst.build", "{m}:string.upper", "{m}_pkg:Thing",
    "{m}_pkg.sub:Thing"])
def test_the_resolver_takes_what_the_user_wrote(code: Path, path: str) -> None:
    assert import_user_object(path.format(m=named(code)), str(code)) is not None


def test_the_resolver_imports_the_file_in_the_working_dir_or_nothing(code: Path,
                                                                     tmp_path: Path) -> None:
    name = named(code)
    # A link to the standard library is refused before anything of it runs.
    (code / f"{name}_link").symlink_to(STDLIB / "json")
    with pytest.raises(UserCodeError, match="outside the working dir"):
        import_user_object(f"{name}_link:loads", str(code))
    assert f"{name}_link" not in sys.modules
    # A working dir in the standard library is no user code either.
    with pytest.raises(UserCodeError, match="standard library"):
        import_user_object("base_events:BaseEventLoop", str(STDLIB / "asyncio"))
    assert "base_events" not in sys.modules
    # A module of that name imported from elsewhere first is not taken for it.
    other = tmp_path / "other"
    other.mkdir()
    (other / f"{name}_helpers.py").write_text("class Helper:\n    pass\n")
    import_user_object(f"{name}_helpers:Helper", str(code))
    with pytest.raises(UserCodeError, match="was imported before"):
        import_user_object(f"{name}_helpers:Helper", str(other))


def strict(root: Path, **kw) -> DeployPolicy:
    return DeployPolicy.build(loopback=False, cwd=str(root), default_image="sf:1",
                              working_dirs=[str(root)], **kw)


ANYWHERE = DeployPolicy.build(loopback=True, cwd="/", default_image="sf:1", working_dirs=["/"])


def test_the_policy_reads_walks_from_the_source(code: Path) -> None:
    name = named(code)
    for policy in (strict(code), ANYWHERE):  # however wide the roots
        for path, words in [(f"{name}:asyncio.base_events.subprocess.Popen", "walks through"),
                            (f"{name}:subprocess.getoutput", "walks through"),
                            (f"{name}:Popen", "imports from 'subprocess'"),
                            (f"{name}:path.join", "imports from 'os'"),
                            (f"{name}:Helper.mro", f"imports from '{name}_helpers'"),
                            (f"{name}:App.__init__.__globals__", "Python's own"),
                            ("os:system", "standard library")]:
            with pytest.raises(PermissionDenied, match=words):
                policy.check_import("p", path, str(code))
        # What the module defines, even under a name it also imports, passes;
        # so does a name it imports from elsewhere, which its import will judge.
        for path in (f"{name}:App.build", f"{name}:string.upper", f"{name}:Helper",
                     f"{name}_pkg:Thing", f"{name}_pkg.sub:Thing"):
            policy.check_import("p", path, str(code))


def test_the_policy_follows_links_out_of_the_working_dir(code: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"  # inside the allowed root, outside the working dir
    elsewhere.mkdir()
    (elsewhere / "far.py").write_text("def f(): ...\n")
    (code / "jsonlink").symlink_to(STDLIB / "json")
    (code / "shlexlink.py").symlink_to(STDLIB / "shlex.py")
    (code / "farlink.py").symlink_to(elsewhere / "far.py")
    (code / "pkglink").mkdir()  # a real package whose __init__ (run first) is a link
    (code / "pkglink" / "__init__.py").symlink_to(STDLIB / "antigravity.py")
    (code / "pkglink" / "sub.py").write_text("class A: ...\n")
    for policy in (DeployPolicy.build(loopback=False, cwd="/", default_image="sf:1",
                                      working_dirs=[str(tmp_path)]), ANYWHERE):
        for path in ("jsonlink:loads", "shlexlink:split", "farlink:f", "pkglink.sub:A"):
            with pytest.raises(PermissionDenied, match="through a link"):
                policy.check_import("p", path, str(code))


def test_installed_code_below_a_root_is_refused_unless_named(code: Path) -> None:
    venv = code / "venv"
    packages = venv / "lib" / "python3" / "site-packages"
    packages.mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (packages / "sneaky.py").write_text("def f(): ...\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "tool.py").write_text("def f(): ...\n")
    for where, path in ((packages, "sneaky:f"), (venv / "bin", "tool:f")):
        with pytest.raises(PermissionDenied, match="installed code"):
            strict(code).check_import("p", path, str(where))
        strict(code, packages_below=[str(venv)]).check_import("p", path, str(where))
    # A plain directory named like an installed package is not that package,
    # which the import system would take instead.
    (code / "psutil").mkdir()
    with pytest.raises(PermissionDenied, match="not installed packages"):
        strict(code).check_import("p", "psutil:Popen", str(code))
    # The standard library is never user code, whatever the roots allow.
    with pytest.raises(PermissionDenied, match="standard library"):
        ANYWHERE.check_import("p", "base_events:BaseEventLoop", str(STDLIB / "asyncio"))
    # Nor is the controller's own directory when it lies outside the roots.
    with pytest.raises(PermissionDenied, match="outside the directories"):
        DeployPolicy.build(loopback=False, cwd=str(code), default_image="sf:1",
                           working_dirs=[str(venv)]).check_import("p", f"{named(code)}:App", "")


def test_every_import_path_of_a_spec_is_checked_where_it_runs(code: Path) -> None:
    name = named(code)
    spec = d.DeploymentSpec(name="m", import_path=f"{name}:App",
                            runtime=d.RuntimeOptions(working_dir=str(code)))
    spec.replica_config.autoscaling_config.policy = "os:system"
    with pytest.raises(PermissionDenied, match=r"^spec.replica_config.autoscaling_config"
                                              r".policy: 'os:system' names the standard"):
        strict(code).check_deployment("spec", spec)
    app = apb.ApplicationSpec(name="a", import_path=f"{name}:builder",
                              runtime=d.RuntimeOptions(working_dir=str(code)),
                              deployments=[apb.DeploymentOverride(name="m")])
    app.deployments[0].replica_config.autoscaling_config.policy = "subprocess:run"
    with pytest.raises(PermissionDenied, match=r"applications\[0\]\.deployments\[0\]"):
        strict(code).check_application("applications[0]", app)
    # Builds and custom policies run on the controller's host even when the
    # replicas' code is in an image: their files are checked here.
    in_image = strict(code, code_on_host=False)
    in_image.check_import("p", "psutil:Popen", str(code))  # a replica's: in the image
    builder = apb.ApplicationSpec(name="b", import_path="psutil:subprocess.getoutput",
                                  runtime=d.RuntimeOptions(working_dir=str(code)))
    with pytest.raises(PermissionDenied, match=r"^b.import_path: .* not installed packages"):
        in_image.check_application("b", builder)
    spec.replica_config.autoscaling_config.policy = "psutil:cpu_count"
    with pytest.raises(PermissionDenied, match=r"^spec.replica_config.autoscaling_config.policy"
                                              r": .* not installed packages"):
        in_image.check_deployment("spec", spec)


def test_with_runtime_none_no_custom_policy_runs(code: Path) -> None:
    nothing_runs = strict(code, code_on_host=False, runs_user_code=False)
    spec = d.DeploymentSpec(name="m", import_path=f"{named(code)}:App",
                            runtime=d.RuntimeOptions(working_dir=str(code)))
    nothing_runs.check_deployment("spec", spec)  # stored, run nowhere
    spec.replica_config.autoscaling_config.policy = f"{named(code)}:builder"
    with pytest.raises(FailedPrecondition, match=r"^spec.replica_config.autoscaling_config"
                                                 r".policy: this controller runs no user code"):
        nothing_runs.check_deployment("spec", spec)
    spec.replica_config.autoscaling_config.policy = "os:system"  # the policy's own word first
    with pytest.raises(PermissionDenied):
        nothing_runs.check_deployment("spec", spec)


@pytest.mark.slow
def test_a_controller_refuses_the_gadgets_and_writes_nothing(code: Path, tmp_path: Path,
                                                             cluster: str) -> None:
    module = named(code)
    (code / "jsonlink").symlink_to(STDLIB / "json")
    url = f"sqlite://{tmp_path}/state.db"
    controller = ControllerProcess(url, cluster=cluster, runtime="process", log_dir=tmp_path,
                                   extra_args=["--allow-working-dir", str(code),
                                               "--no-allow-env"]).start()
    runtime = d.RuntimeOptions(working_dir=str(code))
    pwn = f'[["sh", "-c", "touch {tmp_path}/pwned"]]'
    gadgets = [
        (d.DeploymentSpec(name="g", import_path=f"{module}:asyncio.base_events.subprocess.Popen",
                          init_args_json=pwn, runtime=runtime), "spec.import_path"),
        (d.DeploymentSpec(name="g", import_path=f"{module}:Popen", init_args_json=pwn,
                          runtime=runtime), "spec.import_path"),
        (d.DeploymentSpec(name="g", import_path="jsonlink:loads", runtime=runtime),
         "spec.import_path"),
        (d.DeploymentSpec(name="g", import_path=f"{module}:App", runtime=runtime,
                          grpc_servicer_functions=[f"{module}:subprocess.getoutput"]),
         "spec.grpc_servicer_functions[0]"),
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


@pytest.mark.slow
def test_a_walk_the_source_hides_is_refused_where_it_is_imported(code: Path, tmp_path: Path,
                                                                 cluster: str) -> None:
    """`sp = subprocess` hides the walk from the controller's reading of the
    source: the replica's import, and the build's, refuse it."""
    module = named(code)
    url = f"sqlite://{tmp_path}/state.db"
    controller = ControllerProcess(url, cluster=cluster, runtime="process", log_dir=tmp_path,
                                   extra_args=["--allow-working-dir", str(code)]).start()
    runtime = d.RuntimeOptions(working_dir=str(code))
    try:
        with ControllerClient([controller.address], timeout=20) as client:
            client.deploy(d.DeploymentSpec(
                name="g", import_path=f"{module}:sp.Popen", runtime=runtime,
                init_args_json=f'[["sh", "-c", "touch {tmp_path}/pwned"]]'))
            client.deploy_applications([apb.ApplicationSpec(
                name="b", import_path=f"{module}:sp.getoutput", route_prefix="/b",
                args_json=f'{{"cmd": "touch {tmp_path}/pwned"}}', runtime=runtime)])

            def message(application: str, deployment: str | None = None) -> str:
                for app in client.status().applications:
                    if app.name == application:
                        return app.message if deployment is None else \
                            next((x.message for x in app.deployments if x.name == deployment),
                                 "")
                return ""
            refused = f"{module}:sp is a module"
            wait_for(lambda: refused in message("default", "g"), 60, "the replica's refusal")
            wait_for(lambda: refused in message("b"), 60, "the build's refusal")
            client.shutdown()
    finally:
        controller.stop()
    assert not (tmp_path / "pwned").exists()


def test_only_servefleets_named_deployables_pass_the_servefleet_rule() -> None:
    """servefleet.llm's builder and deployments are deployable by name; nothing
    else of servefleet is, their neighbours included."""
    from servefleet._private.applications.user_code import SERVEFLEET_DEPLOYABLE, refused_name

    for path in SERVEFLEET_DEPLOYABLE:
        assert refused_name(*path.split(":")) is None, path
        assert import_user_object(path) is not None
    for module, attribute in [("servefleet.llm", "LLMServer.__init__"),
                              ("servefleet._private.llm.server", "load_engine"),
                              ("servefleet._private.llm.server", "import_user_object"),
                              ("servefleet.llm", "build_openai_app.__globals__"),
                              ("servefleet._private.applications.user_code", "import_user_object")]:
        assert refused_name(module, attribute) is not None, (module, attribute)


def test_servefleets_deployables_pass_the_policy_from_any_working_dir(code: Path,
                                                                      tmp_path: Path) -> None:
    """servefleet.llm's paths are servefleet's installed code, found in no
    working dir: a user's config naming them deploys from anywhere."""
    from servefleet._private.applications.user_code import SERVEFLEET_DEPLOYABLE

    for policy in (strict(code), ANYWHERE):
        for path in SERVEFLEET_DEPLOYABLE:
            policy.check_import("p", path, str(tmp_path))
        with pytest.raises(PermissionDenied, match="servefleet itself"):
            policy.check_import("p", "servefleet._private.llm.server:load_engine", str(tmp_path))
