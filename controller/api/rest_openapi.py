"""GET /api/openapi.json: the OpenAPI 3.1 document of the controller's REST face.

The request body of PUT /api/serve/applications/ is the config file's JSON
Schema (servefleet/_private/configuration/config_schema.py, written from the same tables the
validator checks with), under Ray's name ServeDeploySchema, its sections as
components of their own. The answers' schemas (ServeInstanceDetails and
its parts, rest_details.py) are written here, and name the config's
sections where an answer carries a config (deployed_app_config,
deployment_config, http_options). tests/test_rest_openapi.py holds every
answer of a running controller to this document (schemathesis).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from servefleet._private.configuration.config_schema import OPENAPI_SCHEMAS, openapi_schemas

Schema = dict[str, Any]

APPLICATIONS_PATH = "/api/serve/applications/"
OPENAPI_PATH = "/api/openapi.json"


def _ref(name: str) -> Schema:
    return {"$ref": OPENAPI_SCHEMAS + name}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, Schema], description: str, closed: bool = True) -> Schema:
    return {"type": "object", "description": description, "properties": properties,
            "required": list(properties), "additionalProperties": not closed}


_TEXT = {"type": ["string", "null"]}
_ACTOR = {"node_id": _TEXT, "node_ip": _TEXT, "node_instance_id": _TEXT, "actor_id": _TEXT,
          "actor_name": _TEXT, "worker_id": _TEXT, "log_file_path": _TEXT}

RESPONSE_SCHEMAS: dict[str, Schema] = {
    "ServeActorDetails": _object(_ACTOR, "A process of the cluster, in Ray's actor terms "
                                 "(fields servefleet has no analogue for are null).",
                                 closed=False),
    "ProxyDetails": _object({**_ACTOR, "status": {"enum": ["HEALTHY", "UNHEALTHY"]}},
                            "A proxy, from its Watch stream.", closed=False),
    "ReplicaDetails": _object({
        **_ACTOR,
        "replica_id": {"type": "string"},
        "state": {"enum": ["STARTING", "RUNNING", "STOPPING", "RECOVERING"]},
        "pid": {"type": ["integer", "null"]},
        "start_time_s": {"type": "number"},
    }, "One replica.", closed=False),
    "DeploymentDetails": _object({
        "name": {"type": "string"},
        "status": {"enum": ["UPDATING", "HEALTHY", "UNHEALTHY", "DEPLOY_FAILED",
                            "UPSCALING", "DOWNSCALING"]},
        "status_trigger": {"type": "string",
                           "description": "Derived from status: servefleet records no "
                                          "trigger."},
        "message": {"type": "string"},
        "deployment_config": _ref("deployment"),
        "target_num_replicas": {"type": "integer", "minimum": 0},
        "required_resources": {"type": "object",
                               "additionalProperties": {"type": "number"}},
        "replicas": {"type": "array", "items": _ref("ReplicaDetails")},
    }, "One deployment of an application."),
    "ApplicationDetails": _object({
        "name": {"type": "string"},
        "route_prefix": _TEXT,
        "docs_path": {"type": "null"},
        "status": {"enum": ["NOT_STARTED", "DEPLOYING", "DEPLOY_FAILED", "RUNNING",
                            "UNHEALTHY", "DELETING"]},
        "message": {"type": "string"},
        "last_deployed_time_s": {"type": "number"},
        "deployed_app_config": _nullable(_ref("application")),
        "source": {"enum": ["declarative", "imperative"]},
        "deployments": {"type": "object",
                        "additionalProperties": _ref("DeploymentDetails")},
        "external_scaler_enabled": {"type": "boolean"},
    }, "One application."),
    "ServeInstanceDetails": _object({
        "controller_info": _ref("ServeActorDetails"),
        "proxy_location": {"enum": ["EveryNode"]},
        "http_options": _ref("http_options"),
        "grpc_options": {"type": "null"},
        "proxies": {"type": "object", "additionalProperties": _ref("ProxyDetails")},
        "deploy_mode": {"const": "MULTI_APP"},
        "applications": {"type": "object",
                         "additionalProperties": _ref("ApplicationDetails")},
        "target_capacity": {"type": "null"},
    }, "The cluster and every application, in Ray Serve's ServeInstanceDetails shape."),
    "Standby": _object({"standby": {"const": True}, "leader": _TEXT},
                       "Answered by a controller that is not the leader: ask the leader "
                       "(its gRPC address; its HTTP face is on the port it was given)."),
}


def _text(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/plain": {"schema": {
        "type": "string"}}}}


def _json(description: str, schema: Schema) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_EMPTY = {"description": "Done (an empty body, as Ray Serve answers)."}
_COMMON = {
    "401": _text("Credentials needed (the cluster has tokens or TLS), or unreadable."),
    "421": _text("The Host header names a host this controller does not answer to."),
    "503": {"description": "Not the leader (JSON: ask the leader), or the store is "
                           "unavailable or the controller shutting down (text): try again.",
            "content": {"application/json": {"schema": _ref("Standby")},
                        "text/plain": {"schema": {"type": "string"}}}},
}
_WRITE = {"403": _text("The caller's role may not change applications (deployer or "
                       "admin may), or the operator's policy refuses what the body asks "
                       "to run (the field is named)."),
          "409": _text("The change conflicts with the cluster's state (a route another "
                       "deployment serves, a controller that runs no code)."),
          "504": _text("The store did not answer in time: the change may or may not be "
                       "stored (a PUT is safe to repeat)."),
          **_COMMON}
_BEARER: list[dict[str, list[str]]] = [{}, {"bearer": []}]


def _document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "servefleet controller REST API", "version": "1",
                 "description": "Ray Serve's REST API (PUT, GET and DELETE "
                                "/api/serve/applications/) on the controller's HTTP port."},
        "paths": {
            APPLICATIONS_PATH: {
                "get": {"operationId": "getServeInstanceDetails",
                        "summary": "The cluster and every application.",
                        "security": _BEARER,
                        "responses": {"200": _json("Details.", _ref("ServeInstanceDetails")),
                                      **_COMMON}},
                "put": {"operationId": "putApplications",
                        "summary": "Deploy these applications; delete those not listed.",
                        "security": _BEARER,
                        "requestBody": {"required": True, "content": {"application/json": {
                            "schema": _ref("ServeDeploySchema")}}},
                        "responses": {"200": _EMPTY,
                                      "400": _text("The body breaks a rule: the message "
                                                   "names the field."),
                                      "413": _text("The body is larger than the limit."),
                                      **_WRITE}},
                "delete": {"operationId": "deleteApplications",
                           "summary": "Delete every application and deployment.",
                           "security": _BEARER,
                           "responses": {"200": _EMPTY, **_WRITE}},
            },
            OPENAPI_PATH: {
                "get": {"operationId": "getOpenApi", "summary": "This document.",
                        "security": _BEARER,
                        "responses": {"200": _json("The document.", {"type": "object"}),
                                      **{k: v for k, v in _COMMON.items() if k != "503"}}},
            },
            "/api/status": {
                "get": {"operationId": "getStatus",
                        "summary": "The dashboard's snapshot of the cluster.",
                        "security": _BEARER,
                        "responses": {"200": _json("The snapshot.", {"type": "object"}),
                                      **_COMMON}},
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "A token of --auth-tokens (or a "
                                                          "client certificate of the role)."}},
            "schemas": {**openapi_schemas("ServeDeploySchema"), **RESPONSE_SCHEMAS},
        },
    }


@functools.cache
def document_bytes() -> bytes:
    """The document as served (the same for every caller and term)."""
    return json.dumps(_document(), indent=1).encode()
