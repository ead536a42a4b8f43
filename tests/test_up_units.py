"""`servefleet up`'s pure parts, no processes: what TARGET deploys (a config
file, or an import path as Ray's `serve run` takes one), the commands it
suggests, and a failure printed whole (tests/test_up.py runs `up` itself)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from servefleet._private.applications.build import build
from servefleet._private.cli.errors import CommandFailed, UsageError
from servefleet._private.cli.main import build_parser
from servefleet._private.cli.up_report import failures_in_full, suggestions
from servefleet._private.cli.up_target import target_request
from servefleet._private.llm.openai_protocol import chat_request
from servefleet.controller.goals.app_specs import deployment_specs
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import status_pb2

APPS = Path(__file__).parent / "apps"


def request_for(*argv: str) -> api.DeployApplicationsRequest | None:
    return target_request(build_parser().parse_args(["up", *argv]))


def test_an_existing_file_is_a_config_and_anything_else_an_import_path(
        tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("app = None\n")
    (tmp_path / "serve.yaml").write_text("applications:\n  - {name: a, import_path: model:app}\n")
    assert [a.name for a in request_for("serve.yaml").applications] == ["a"]
    assert request_for() is None

    (app,) = request_for("model:app").applications
    assert (app.name, app.import_path, app.runtime.working_dir) == (
        "default", "model:app", str(tmp_path))  # Ray's name; "/" (unset) its route
    assert not app.HasField("route_prefix") and not app.args_json
    (dotted,) = request_for("model.app").applications  # Ray's dotted form
    assert dotted.import_path == "model:app"

    # A builder's args, Ray's flags, and a module in another directory.
    elsewhere = tmp_path / "code"
    elsewhere.mkdir()
    (elsewhere / "hello.py").write_text("def app_builder(args): ...\n")
    (app,) = request_for("hello:app_builder", "message=hi", "size=a=b", "--app-dir", "code",
                         "--name", "hello", "--route-prefix", "/hello").applications
    assert json.loads(app.args_json) == {"message": "hi", "size": "a=b"}
    assert (app.name, app.route_prefix, app.runtime.working_dir) == (
        "hello", "/hello", str(elsewhere))

    # An installed module: no working dir (nothing to hash, nothing to allow).
    (llm,) = request_for("servefleet.llm:build_openai_app").applications
    assert llm.import_path == "servefleet.llm:build_openai_app"
    assert not llm.HasField("runtime")


@pytest.mark.parametrize(("argv", "said"), [
    (["nope.yaml"], "nope.yaml: no such file, and no module 'nope' in "),
    (["missing:app"], "missing:app: no such file, and no module 'missing' in "),
    (["conf/nope.yaml"], "conf/nope.yaml: no such file, and not an import path either"),
    (["."], ".: a directory, not a file, and not an import path either"),
    (["model.py"], "model.py: a Python file, not a config file; name what it serves by "
                   "import path: model:app"),
    (["model:app", "size"], "'size': an application argument is KEY=VALUE"),
    (["model:app", "a=1", "a=2"], "a: given twice ('1' and '2')"),
    (["model:app", "--working-dir", "nowhere"], "--working-dir nowhere: no such directory"),
    (["serve.yaml", "a=1"], "KEY=VALUE: only with an import path; the config file serve.yaml "
                            "sets its applications' args"),
    (["serve.yaml", "--route-prefix", "/x"], "--route-prefix: only with an import path"),
    (["--name", "x"], "--name: only with an import path; none is given"),
])
def test_what_is_neither_or_mixes_the_two_is_a_usage_error_naming_it(
        tmp_path, monkeypatch, argv: list[str], said: str) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text("app = None\n")
    (tmp_path / "serve.yaml").write_text("applications:\n  - {name: a, import_path: model:app}\n")
    with pytest.raises(UsageError) as raised:
        request_for(*argv)
    assert said in str(raised.value)


def test_up_applies_grpc_options_address_so_it_leaves_out_the_deploy_note(
        tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.yaml").write_text(
        "grpc_options: {host: 127.0.0.1, port: 9000, request_timeout_s: 5}\n"
        "applications:\n  - {name: a, import_path: model:app}\n")
    request_for("serve.yaml")
    warned = capsys.readouterr().err.splitlines()
    assert warned == [line for line in warned if "request_timeout_s" in line] != []


def test_a_wrong_config_file_fails_as_before(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "serve.yaml").write_text("applications: 3\n")
    with pytest.raises(CommandFailed, match=r"serve\.yaml: applications"):
        request_for("serve.yaml")


def _request(**app: Any) -> api.DeployApplicationsRequest:
    return api.DeployApplicationsRequest(applications=[apb.ApplicationSpec(**app)])


def test_an_openai_ingress_is_tried_with_a_chat_completion_for_its_model() -> None:
    """Its route itself is 404: the suggestion is a request its API takes,
    for a model it serves (the spec made from the real build's graph, as the
    controller makes it)."""
    spec = apb.ApplicationSpec(name="llm", import_path="servefleet.llm:build_openai_app",
                               route_prefix="/llm")
    built = build(spec.import_path, ".", {"llm_configs": [{"model_id": "kjv-trigram"},
                                                          {"model_id": "other"}]})
    assert built["ok"], built
    ingress = deployment_specs(spec, built["graph"])[0]
    request = api.DeployApplicationsRequest(applications=[spec])
    (line,) = suggestions(request, "127.0.0.1:8000", None, None, {"llm": ingress})
    words = shlex.split(line)
    assert words[:2] == ["curl", "http://127.0.0.1:8000/llm/v1/chat/completions"]
    body = json.loads(words[words.index("-d") + 1])
    assert body["model"] == "kjv-trigram"
    assert chat_request(body).messages  # what the ingress reads from it
    # At "/", no double slash; any other ingress gets its route.
    (line,) = suggestions(_request(name="llm", route_prefix="/"), "h:1", None, None,
                          {"llm": ingress})
    assert shlex.split(line)[1] == "http://h:1/v1/chat/completions"
    other = deployment_specs(spec, build("graph_app:app", str(APPS), {})["graph"])[0]
    assert suggestions(_request(name="calc", route_prefix="/calc"), "h:1", None, None,
                       {"calc": other}) == ["curl http://h:1/calc"]
    assert suggestions(_request(name="calc"), "h:1", None, None, {}) == ["curl http://h:1/"]
    assert suggestions(_request(name="calc", no_route=True), "h:1", None, None, {}) == []


def test_a_failure_is_printed_whole_with_its_traceback() -> None:
    AS, DS = status_pb2.ApplicationStatus, status_pb2.DeploymentStatus
    traceback = ("RuntimeError: weights missing\nTraceback (most recent call last):\n"
                 '  File "model.py", line 7, in <module>\nRuntimeError: weights missing')
    status = api.GetStatusResponse(applications=[
        status_pb2.ApplicationStatusInfo(name="built", status=AS.APPLICATION_STATUS_DEPLOY_FAILED,
                                         message=traceback),
        status_pb2.ApplicationStatusInfo(
            name="started", status=AS.APPLICATION_STATUS_DEPLOY_FAILED,
            message="failed to deploy: Model", deployments=[
                status_pb2.DeploymentStatusInfo(name="Model", message=traceback,
                                                status=DS.DEPLOYMENT_STATUS_DEPLOY_FAILED),
                status_pb2.DeploymentStatusInfo(name="Fine",
                                                status=DS.DEPLOYMENT_STATUS_HEALTHY)]),
        status_pb2.ApplicationStatusInfo(name="fine", status=AS.APPLICATION_STATUS_RUNNING)])
    indented = ["  " + line for line in traceback.splitlines()]
    assert failures_in_full(status, ["built", "started", "fine"]) == [
        "built failed to deploy:", *indented, "started/Model failed to deploy:", *indented]
    assert failures_in_full(status, ["fine"]) == []
