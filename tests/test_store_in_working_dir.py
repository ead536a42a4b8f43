"""A controller whose sqlite store sits in a deployment's working dir (started
from the code's directory with `--store sqlite:///$PWD/state.db`): the store
changes on every write, and the controller never counts it as code, so a
redeploy of unchanged code changes nothing. Real controller processes."""

from __future__ import annotations

import pytest

from servefleet._private.testing import ControllerProcess, wait_for
from servefleet.client import ControllerClient
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import deployment_pb2 as d

pytestmark = pytest.mark.slow

MODULE = """\
from servefleet import deployment

@deployment(num_replicas=0)
class Model:
    def __call__(self, request):
        return "ok"

app = Model.bind()
"""


def controller_in(code, cluster: str, runtime: str) -> ControllerProcess:
    code.mkdir()
    (code.parent / "logs").mkdir()
    (code / "model.py").write_text(MODULE)
    return ControllerProcess(f"sqlite://{code}/state.db", cluster=cluster, runtime=runtime,
                             log_dir=code.parent / "logs",
                             extra_args=["--allow-working-dir", str(code)]).start()


def test_a_redeploy_of_unchanged_code_beside_the_store_changes_nothing(tmp_path,
                                                                       cluster) -> None:
    controller = controller_in(tmp_path / "code", cluster, "none")
    spec = d.DeploymentSpec(name="Model", import_path="model:Model",
                            runtime=d.RuntimeOptions(working_dir=str(tmp_path / "code")))
    try:
        with ControllerClient(controller.address, timeout=30) as client:
            first = client.deploy(spec)
            assert first.updating
            again = client.deploy(spec)  # the first deploy wrote to state.db
            assert (again.version, again.updating) == (first.version, False)
            (tmp_path / "code" / "model.py").write_text(MODULE + "# edited\n")
            assert client.deploy(spec).updating  # the code itself still counts
            client.shutdown()
    finally:
        controller.stop()


def test_an_application_redeployed_unchanged_beside_the_store_is_unchanged(tmp_path,
                                                                           cluster) -> None:
    code = tmp_path / "code"
    controller = controller_in(code, cluster, "process")
    app = apb.ApplicationSpec(name="calc", import_path="model:app",
                              runtime=d.RuntimeOptions(working_dir=str(code)))
    try:
        with ControllerClient(controller.address, timeout=30) as client:
            assert list(client.deploy_applications([app]).changed) == ["calc"]
            # Built: the application's deployments are written to the store.
            wait_for(lambda: [r.spec.name for r in client.list(application="calc")] == ["Model"],
                     60, "the build's deployments")
            assert list(client.deploy_applications([app]).changed) == []
            client.shutdown()
    finally:
        controller.stop()
