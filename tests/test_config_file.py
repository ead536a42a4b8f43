"""Config files: parsing, errors that name the path, and writing them back (pure)."""

from __future__ import annotations

import textwrap

import pytest

from servefleet._private.configuration.config_file import (
    ConfigError,
    dump_config,
    grpc_listen_of,
    load_config,
    parse_config,
)
from servefleet.v1 import controller_pb2 as api


def write(tmp_path, text: str) -> str:
    path = tmp_path / "app.yaml"
    path.write_text(textwrap.dedent(text))
    return str(path)


FULL = """
    http_options: {host: 127.0.0.1, port: 8001, request_timeout_s: 5,
                   max_request_body_bytes: 1000}
    applications:
      - name: calc
        route_prefix: /calc
        require_token: true
        import_path: graph_app:builder
        args: {increment: 3}
        runtime: {working_dir: apps, env: {A: "1"},
                  placement: {constraints: ["node.labels.gpu == true"],
                              spread: [node.labels.zone]}}
        traffic:
          split: {Front: 90, Canary: 10}
          shadow: {deployment: Shadow, fraction: 0.25}
        deployments:
          - name: Adder
            num_replicas: 3
            max_ongoing_requests: 7
            user_config: {scale: 2}
            autoscaling_config: {min_replicas: 1, max_replicas: 4, aggregation_function: max,
                                 downscale_to_zero_delay_s: 30}
            version: v9
            runtime: {env: {B: "2"}}
      - name: quiet
        route_prefix: null
        import_path: graph_app:hello
"""


def test_a_full_config_becomes_the_request(tmp_path) -> None:
    request = load_config(write(tmp_path, FULL))
    assert (request.http_options.port, request.http_options.request_timeout_s) == (8001, 5)
    assert request.http_options.max_request_body_bytes == 1000
    calc, quiet = request.applications
    assert calc.require_token and not quiet.require_token
    assert calc.route_prefix == "/calc" and calc.args_json == '{"increment":3}'
    assert calc.runtime.working_dir == str(tmp_path / "apps")  # relative to the file
    assert [(t.deployment, t.weight) for t in calc.traffic.split] == [("Front", 90),
                                                                      ("Canary", 10)]
    assert calc.traffic.shadow.fraction == 0.25
    (adder,) = calc.deployments
    assert adder.replica_config.num_replicas == 3 and adder.version == "v9"
    assert adder.replica_config.user_config_json == '{"scale":2}'
    auto = adder.replica_config.autoscaling_config
    assert (auto.max_replicas, auto.aggregation_function, auto.downscale_to_zero_delay_s) == (
        4, "max", 30)
    assert dict(adder.runtime.env) == {"B": "2"}
    assert quiet.no_route and not quiet.HasField("route_prefix")


def test_dump_writes_back_what_load_reads(tmp_path) -> None:
    request = load_config(write(tmp_path, FULL))
    reply = api.ListApplicationsResponse(http_options=request.http_options)
    for spec in request.applications:
        reply.applications.add(spec=spec)
    again = parse_config(__import__("yaml").safe_load(dump_config(reply)), "/")
    assert list(again.applications) == list(request.applications)
    assert again.http_options == request.http_options


@pytest.mark.parametrize(("text", "message"), [
    ("applications: [{name: a}]", "applications[0].import_path: required"),
    ("applications: {}", "applications: expected a list"),
    ("apps: []", "(top level).apps: unknown key"),
    ("applications: [{name: a, import_path: m:a, deployments: [{name: D, num_replicas: two}]}]",
     "applications[0].deployments[0].num_replicas: expected an integer, got 'two'"),
    ("applications: [{name: a, import_path: m:a, deployments: [{num_replicas: 1}]}]",
     "applications[0].deployments[0].name: required"),
    ("applications: [{name: a, import_path: m:a, deployments: [{name: D, replicas: 1}]}]",
     "applications[0].deployments[0].replicas: unknown key"),
    ("applications: [{name: a, import_path: m:a, runtime_env: {pip: [torch]}}]",
     "applications[0].runtime_env.pip: not supported: servefleet installs no packages"),
    ("applications: [{name: a, import_path: m:a, runtime: {env: {X: 1}}}]",
     "applications[0].runtime.env.X: expected a string, got 1"),
    ("http_options: {port: 99999}\napplications: []", "http_options.port: must be between"),
    ("applications: [{name: a, import_path: m:a, traffic: {split: 5}}]",
     "applications[0].traffic.split: expected a mapping"),
    ("applications: [{name: a, import_path: m:a, args: [1]}]",
     "applications[0].args: expected a mapping"),
    ("applications: [: bad", "not valid YAML"),
    ("grpc_options: {port: 0}\napplications: []", "grpc_options.port: must be between"),
    ("applications: [{name: a, import_path: m:a, runtime: {placement: {constraints: x}}}]",
     "applications[0].runtime.placement.constraints: expected a list of strings"),
    ("applications: [{name: a, import_path: m:a, runtime: {placement: {zones: []}}}]",
     "applications[0].runtime.placement.zones: unknown key"),
    ("grpc_options: {grpc_servicer_functions: m:f}\napplications: []",
     "grpc_options.grpc_servicer_functions: expected a list of import paths"),
    ("grpc_options: {servicers: []}\napplications: []", "grpc_options.servicers: unknown key"),
    ("applications: [{name: a, import_path: m:a, grpc_servicer_functions: [3]}]",
     "applications[0].grpc_servicer_functions[0]: expected a string, got 3"),
    # Out of the options' bounds: named, with the range, not a protobuf ValueError.
    ("applications: [{name: a, import_path: m:a, deployments: [{name: D, num_replicas: -1}]}]",
     "applications[0].deployments[0].num_replicas: must be between 0 and 10000, got -1"),
    ("applications: [{name: a, import_path: m:a, deployments: "
     "[{name: D, num_replicas: 99999999999}]}]",
     "applications[0].deployments[0].num_replicas: must be between 0 and 10000, "
     "got 99999999999"),
    ("applications: [{name: a, import_path: m:a, deployments: "
     "[{name: D, max_ongoing_requests: -5}]}]",
     "applications[0].deployments[0].max_ongoing_requests: must be between 1 and 100000, "
     "got -5"),
    ("applications: [{name: a, import_path: m:a, deployments: "
     "[{name: D, max_queued_requests: -2}]}]",
     "max_queued_requests: must be between -1 and 1000000 (-1: no limit), got -2"),
    ("applications: [{name: a, import_path: m:a, deployments: "
     "[{name: D, autoscaling_config: {max_replicas: 4294967296}}]}]",
     "autoscaling_config.max_replicas: must be between 1 and 10000, got 4294967296"),
])
def test_errors_name_the_file_and_the_path(tmp_path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_a_missing_file_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "nope.yaml"))


def test_grpc_options_serve_every_application_that_lists_none(tmp_path) -> None:
    path = write(tmp_path, """
        grpc_options:
          port: 9001
          grpc_servicer_functions: [pb_grpc:add_AServicer_to_server]
        applications:
          - {name: one, import_path: m:a}
          - {name: two, import_path: m:b, grpc_servicer_functions: [pb_grpc:add_B_to_server]}
    """)
    request = load_config(path, lambda line: None)  # the port's note: test_ray_config.py
    assert [list(a.grpc_servicer_functions) for a in request.applications] == [
        ["pb_grpc:add_AServicer_to_server"], ["pb_grpc:add_B_to_server"]]
    assert grpc_listen_of(path) == "127.0.0.1:9001"
    assert grpc_listen_of(write(tmp_path, "applications: []")) is None
    reply = api.ListApplicationsResponse()
    for spec in request.applications:
        reply.applications.add(spec=spec)
    again = parse_config(__import__("yaml").safe_load(dump_config(reply)), "/")
    assert list(again.applications) == list(request.applications)
