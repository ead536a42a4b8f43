"""The REST face's pure parts: reading a PUT's body, the OpenAPI document, and
details of deployments checked against that document."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from servefleet._private.configuration.config_file import dump_config
from servefleet.controller.api import rest_openapi
from servefleet.controller.api.rest import Refusal, parse_body
from servefleet.controller.api.rest_details import deployment_details
from servefleet.v1 import application_pb2 as apb
from servefleet.v1 import controller_pb2 as api
from servefleet.v1 import deployment_pb2 as dpb
from servefleet.v1 import records_pb2, status_pb2

DOCUMENT = json.loads(rest_openapi.document_bytes())


def validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator of components/schemas/`name`, its $refs resolved in the document."""
    return jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{name}",
                                            "components": DOCUMENT["components"]})


def test_a_body_is_read_by_the_config_parser_with_its_messages() -> None:
    request = parse_body(json.dumps({"applications": [
        {"import_path": "mod.app", "runtime_env": {"working_dir": "/srv/code"},
         "deployments": [{"name": "D", "num_replicas": 2}]}]}).encode())
    (app,) = request.applications
    assert (app.name, app.import_path, app.runtime.working_dir) == ("default", "mod:app",
                                                                    "/srv/code")
    bad = [(b"{", "the body is not JSON"),
           (b'{"applications": [{"import_path": "m:a", "num_replicas": NaN}]}',
            "NaN is not a JSON number"),
           (b"[" * 100_000 + b"]" * 100_000, "the body is not JSON"),
           (b"[]", "(top level): expected a mapping"),
           (b'{"applications": [{"name": "a"}]}', "applications[0].import_path: required"),
           (json.dumps({"applications": [{"import_path": "m:a", "deployments": [
               {"name": "D", "num_replicas": "two"}]}]}).encode(),
            "applications[0].deployments[0].num_replicas: expected an integer, got 'two'"),
           (b'{"applications": [], "target_capacity": 50}', "target_capacity")]
    for body, message in bad:
        with pytest.raises(Refusal) as refused:
            parse_body(body)
        assert refused.value.status == 400 and message in refused.value.message, body[:80]


def test_the_document_is_openapi_3_1_with_the_config_schema_as_the_put_body() -> None:
    assert DOCUMENT["openapi"] == "3.1.0"
    put = DOCUMENT["paths"]["/api/serve/applications/"]["put"]
    body = put["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/ServeDeploySchema"}
    schemas = DOCUMENT["components"]["schemas"]
    text = json.dumps(DOCUMENT)
    assert "#/$defs/" not in text  # every reference points into the document
    for ref in {r for r in text.split('"$ref": "')[1:]}:
        assert ref.split('"')[0].removeprefix("#/components/schemas/") in schemas
    config = validator("ServeDeploySchema")
    with open("examples/config.yaml") as f:
        assert list(config.iter_errors(yaml.safe_load(f))) == []
    assert list(config.iter_errors({"applications": [{"import_path": "m:a", "bogus": 1}]}))


def test_a_deployments_details_meet_the_document_whatever_options_it_has() -> None:
    """Every option a deployment can hold comes back as the config's key:
    retry_methods was a protobuf container and request_router_kwargs went out
    under its wire name (request_router_kwargs_json), so `servefleet config`
    could not print such an application either."""
    config = dpb.ReplicaConfig(
        num_replicas=2, max_ongoing_requests=3, user_config_json='{"a": 1}',
        retry_methods=["GET"], request_router="pow2",
        request_router_kwargs_json='{"k": 1}',
        autoscaling_config=dpb.AutoscalingConfig(min_replicas=1, max_replicas=3),
        resources=dpb.Resources(num_cpus=0.5, memory_bytes=1 << 20, custom={"TPU": 1}))
    record = records_pb2.DeploymentRecord(spec=dpb.DeploymentSpec(
        name="D", application="a", replica_config=config))
    info = status_pb2.DeploymentStatusInfo(
        name="D", status=status_pb2.DEPLOYMENT_STATUS_HEALTHY, target_replicas=2)
    details = deployment_details(info, record, [])
    assert list(validator("DeploymentDetails").iter_errors(details)) == []
    assert details["deployment_config"]["request_router_kwargs"] == {"k": 1}
    assert details["required_resources"] == {"CPU": 0.5, "memory": float(1 << 20), "TPU": 1}
    assert (details["status"], details["status_trigger"]) == ("HEALTHY",
                                                              "CONFIG_UPDATE_COMPLETED")
    reply = api.ListApplicationsResponse(applications=[apb.ApplicationRecord(
        spec=apb.ApplicationSpec(name="a", import_path="m:a", deployments=[
            apb.DeploymentOverride(name="D", replica_config=config)]))])
    assert "retry_methods:\n    - GET" in dump_config(reply)
