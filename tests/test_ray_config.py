"""Config files written as Ray Serve writes them (`serve deploy` files): read
with a warning line for each renamed or unused key, refused by name where
servefleet cannot do what they ask, and deployed on a real controller with
Ray's dotted gRPC servicer functions serving through the proxy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import grpc
import pytest

from servefleet._private.configuration.config_file import ConfigError, ConfigWarning, load_config
from servefleet._private.testing import wait_for
from servefleet.v1 import status_pb2

ROOT = Path(__file__).resolve().parent.parent
APPS = str(ROOT / "tests" / "apps")
sys.path.insert(0, str(ROOT / "examples"))

from grpc_classifier import classifier_pb2 as pb  # noqa: E402
from grpc_classifier import classifier_pb2_grpc as pb_grpc  # noqa: E402

# Ray's dotted form of the servicer function: no colon.
DOTTED_SERVICER = "grpc_classifier.classifier_pb2_grpc.add_ClassifierServicer_to_server"

RAY_FILE = """
    proxy_location: EveryNode
    http_options:
      host: 127.0.0.1
      request_timeout_s: 30
      keep_alive_timeout_s: 5
    grpc_options:
      port: 9000
      grpc_servicer_functions:
        - {servicer}
    logging_config:
      encoding: JSON
      log_level: INFO
    applications:
      - name: clf
        route_prefix: /clf
        import_path: grpc_app.build
        args: {{marks: {marks}}}
        runtime_env:
          working_dir: {working_dir}
          env_vars: {{RAY_STYLE: "yes"}}
        deployments:
          - name: Model
            max_concurrent_queries: 4
            graceful_shutdown_timeout_s: 5
            graceful_shutdown_wait_loop_s: 0.1
            ray_actor_options:
              num_cpus: 0.5
            autoscaling_config:
              min_replicas: 1
              initial_replicas: 1
              max_replicas: 2
              target_num_ongoing_requests_per_replica: 3
"""


def write(tmp_path: Path, text: str, name: str = "serve_config.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def ray_file(tmp_path: Path, working_dir: str = APPS) -> str:
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    return write(tmp_path, RAY_FILE.format(servicer=DOTTED_SERVICER, marks=marks,
                                           working_dir=working_dir))


def test_a_ray_file_becomes_servefleets_request_with_a_line_per_key(tmp_path) -> None:
    lines: list[str] = []
    path = ray_file(tmp_path, working_dir="apps")
    request = load_config(path, lines.append)
    (app,) = request.applications
    assert app.import_path == "grpc_app:build"
    assert list(app.grpc_servicer_functions) == [
        "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"]
    # runtime_env is the application's runtime; working_dir relative to the file.
    assert app.runtime.working_dir == str(tmp_path / "apps")
    assert dict(app.runtime.env) == {"RAY_STYLE": "yes"}
    (model,) = app.deployments
    config = model.replica_config
    assert config.max_ongoing_requests == 4
    assert config.autoscaling_config.target_ongoing_requests == 3
    assert not config.HasField("resources")  # Ray's logical CPUs are no limit here
    assert request.http_options.request_timeout_s == 30
    prefix = f"{path}: "
    assert all(line.startswith(prefix) for line in lines)
    assert [line.removeprefix(prefix).split(":")[0] for line in lines] == [
        "proxy_location", "logging_config", "http_options.keep_alive_timeout_s",
        "grpc_options.port", "applications[0].deployments[0].max_concurrent_queries",
        "applications[0].deployments[0].autoscaling_config."
        "target_num_ongoing_requests_per_replica"]
    assert "deprecated, use max_ongoing_requests" in lines[4]
    assert "servefleet proxy --keep-alive-timeout-s" in lines[2]
    # A deploy cannot move a running proxy's gRPC port: said, not silently dropped.
    assert "not applied by a deploy" in lines[3] and "--grpc-listen" in lines[3]


def test_without_a_warn_function_the_lines_are_config_warnings(tmp_path) -> None:
    path = write(tmp_path, """
        applications:
          - import_path: graph_app.hello
            deployments: [{name: Hello, max_concurrent_queries: 2}]
    """)
    with pytest.warns(ConfigWarning, match=r"deployments\[0\].max_concurrent_queries: "
                                           "deprecated, use max_ongoing_requests"):
        request = load_config(path)
    # An application the file does not name is Ray's "default".
    assert request.applications[0].name == "default"


def test_a_deployments_route_prefix_is_deprecated_and_the_applications_counts(tmp_path) -> None:
    lines: list[str] = []
    request = load_config(write(tmp_path, """
        applications:
          - {name: a, import_path: "m:a", route_prefix: /a,
             deployments: [{name: D, route_prefix: /d, num_replicas: auto}]}
    """), lines.append)
    (app,) = request.applications
    assert app.route_prefix == "/a"
    assert app.deployments[0].replica_config.autoscaling_config.max_replicas == 100
    assert len(lines) == 1 and "route_prefix: deprecated on a deployment" in lines[0]


@pytest.mark.parametrize(("text", "message"), [
    ("applications: [{name: a, import_path: m.a, runtime_env: {pip: [torch]}}]",
     "applications[0].runtime_env.pip: not supported: servefleet installs no packages"),
    ("applications: [{name: a, import_path: m.a, runtime_env: {conda: {}}}]",
     "applications[0].runtime_env.conda: not supported"),
    ("applications: [{name: a, import_path: m.a,\n"
     "                runtime_env: {working_dir: 'https://example.com/code.zip'}}]",
     "applications[0].runtime_env.working_dir: a remote URI"),
    ("applications: [{name: a, import_path: m.a, runtime: {}, runtime_env: {}}]",
     "applications[0].runtime_env: give runtime or runtime_env, not both"),
    ("applications: [{name: a, import_path: m.a, port: 8000}]",
     "applications[0].port: unknown key (set host and port under http_options"),
    ("target_capacity: 50\napplications: []", "target_capacity: servefleet runs every "
                                              "application at full capacity"),
    ("proxy_location: Everywhere\napplications: []",
     "proxy_location: must be one of EveryNode, HeadOnly, Disabled, got 'Everywhere'"),
    ("http_options: {root_path: /api}\napplications: []",
     "http_options.root_path: servefleet has no prefix over every route"),
    ("logging_config: {log_level: DEBUG, colour: true}\napplications: []",
     "logging_config.colour: unknown key"),
    ("applications: [{name: a, import_path: m.a,\n"
     "                deployments: [{name: D, ray_actor_options: {runtime_env: {uv: [x]}}}]}]",
     "applications[0].deployments[0].ray_actor_options.runtime_env.uv: not supported"),
])
def test_what_servefleet_cannot_do_is_an_error_naming_the_key(tmp_path, text: str,
                                                               message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text), lambda line: None)
    assert message in str(caught.value)


def test_full_capacity_and_an_empty_root_path_are_what_servefleet_does(tmp_path) -> None:
    lines: list[str] = []
    load_config(write(tmp_path, """
        target_capacity: 100
        http_options: {root_path: ""}
        applications: []
    """), lines.append)
    assert lines == []


def _servefleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servefleet", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_a_ray_file_deploys_and_serves_grpc_on_a_real_controller(grpc_cluster, sqlite_fleet,
                                                                 tmp_path) -> None:
    client, _proxy, target = grpc_cluster
    address = ",".join(sqlite_fleet.addresses())
    deployed = _servefleet("deploy", ray_file(tmp_path), "--wait", "--controller", address)
    assert deployed.returncode == 0, deployed.stderr
    warned = [line for line in deployed.stderr.splitlines() if line.startswith("warning: ")]
    assert any("max_concurrent_queries: deprecated, use max_ongoing_requests" in line
               for line in warned), deployed.stderr
    assert any("target_num_ongoing_requests_per_replica: deprecated, use "
               "target_ongoing_requests" in line for line in warned), deployed.stderr
    # The file's port 9000 is not where the running proxy serves gRPC: said so.
    assert any("grpc_options.port: not applied by a deploy" in line
               for line in warned), deployed.stderr
    assert client.application_status("clf").status == status_pb2.APPLICATION_STATUS_RUNNING

    # The controller holds servefleet's names and forms.
    record = client.get("Model", "clf")
    config = record.spec.replica_config
    assert config.max_ongoing_requests == 4
    assert config.autoscaling_config.target_ongoing_requests == 3
    assert record.spec.runtime.env["RAY_STYLE"] == "yes"
    assert list(record.spec.grpc_servicer_functions) == [
        "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"]

    # The service the dotted function registers answers through the proxy.
    stub = pb_grpc.ClassifierStub(grpc.insecure_channel(target))

    def answers() -> bool:
        try:
            reply = stub.Predict(pb.PredictRequest(text="hi"), timeout=5,
                                 metadata=(("application", "clf"),))
        except grpc.RpcError:
            return False
        return reply.label == "v1"

    wait_for(answers, 30, "the dotted servicer's service at the proxy")


def test_the_controller_takes_rays_dotted_paths_from_any_client() -> None:
    """Clients other than the config file (the gRPC API, other languages) may
    send Ray's dotted form: the controller writes it with its colon before
    any check splits it there."""
    from servefleet.controller.goals.app_specs import normalize_application
    from servefleet.v1 import application_pb2 as apb

    spec = normalize_application(apb.ApplicationSpec(
        name="a", import_path="pkg.app.graph", grpc_servicer_functions=[DOTTED_SERVICER]),
        "applications[0]")
    assert spec.import_path == "pkg.app:graph"
    assert list(spec.grpc_servicer_functions) == [
        "grpc_classifier.classifier_pb2_grpc:add_ClassifierServicer_to_server"]


def test_rays_gpus_are_written_back_as_servefleets_resources(tmp_path) -> None:
    import yaml

    from servefleet._private.configuration.config_file import dump_config, parse_config
    from servefleet.v1 import controller_pb2 as api

    request = load_config(write(tmp_path, """
        applications:
          - {name: a, import_path: m.a,
             deployments: [{name: D, ray_actor_options: {num_gpus: 1}}]}
    """), lambda line: None)
    assert request.applications[0].deployments[0].replica_config.resources.num_gpus == 1
    reply = api.ListApplicationsResponse()
    reply.applications.add(spec=request.applications[0])
    written = yaml.safe_load(dump_config(reply))
    assert written["applications"][0]["deployments"][0]["resources"] == {"num_gpus": 1.0}
    assert list(parse_config(written, "/").applications) == list(request.applications)
