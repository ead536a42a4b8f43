"""The ServeApplication CRD (servefleet/_private/configuration/crd.py): the
committed copies are `servefleet config crd`'s output, its schema is a
structural one written from the config file's application section, and
the conversion's cases (nulls, int-or-string, free-form values) hold.
Whether a real API server takes it: tests/test_kube_apps_cluster.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from servefleet._private.configuration.config_fields import APPLICATION, DEPLOYMENT
from servefleet._private.configuration.crd import (
    CRD_PATHS,
    GROUP,
    PLURAL,
    crd,
    crd_text,
    spec_schema,
    structural,
)

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_copies_are_current() -> None:
    for path in CRD_PATHS:
        assert (ROOT / path).read_text() == crd_text(), (
            f"{path} is stale: run `.venv/bin/servefleet config crd > {path}` and commit it")


def test_the_cli_prints_it() -> None:
    done = subprocess.run([sys.executable, "-m", "servefleet", "config", "crd"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout == crd_text()
    assert yaml.safe_load(done.stdout)["metadata"]["name"] == f"{PLURAL}.{GROUP}"


def _nodes(schema: dict[str, Any], path: str = "spec"):
    yield path, schema
    for key, child in (schema.get("properties") or {}).items():
        yield from _nodes(child, f"{path}.{key}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _nodes(schema[key], f"{path}.{key}")


def test_the_spec_schema_is_structural() -> None:
    """Kubernetes' rules for a CRD's schema: every node has one type (or
    keeps unknown fields, or is int-or-string), no $ref, no logical junctors
    here, properties and additionalProperties never together."""
    for path, node in _nodes(spec_schema()):
        assert not {"$ref", "oneOf", "allOf", "not", "const", "propertyNames",
                    "deprecated", "if", "then", "$defs"} & set(node), path
        if "anyOf" in node:  # only int-or-string's own form
            assert node["x-kubernetes-int-or-string"], path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        assert (isinstance(node.get("type"), str)
                or node.get("x-kubernetes-preserve-unknown-fields")
                or node.get("x-kubernetes-int-or-string")), path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("type") == "object":
            assert ("properties" in node or "additionalProperties" in node
                    or node.get("x-kubernetes-preserve-unknown-fields")), (
                f"{path}: an object without fields would be pruned empty")


def test_the_spec_has_every_key_of_an_application_and_of_a_deployment() -> None:
    spec = spec_schema()
    assert set(spec["properties"]) == {f.name for f in APPLICATION.fields}
    deployment = spec["properties"]["deployments"]["items"]
    assert set(deployment["properties"]) == {f.name for f in DEPLOYMENT.fields}
    assert spec["required"] == ["import_path"] and deployment["required"] == ["name"]
    for path, node in _nodes(spec):
        if path.count(".") == 1:
            assert node.get("description"), path


def test_nulls_int_or_string_and_free_form_values() -> None:
    spec = spec_schema()["properties"]
    # route_prefix: null means no HTTP route, so a null must not be pruned.
    assert spec["route_prefix"] == {**spec["route_prefix"], "type": "string", "nullable": True}
    replicas = spec["deployments"]["items"]["properties"]["num_replicas"]
    assert replicas["x-kubernetes-int-or-string"] and replicas["nullable"]
    assert replicas["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    user_config = spec["deployments"]["items"]["properties"]["user_config"]
    assert user_config["x-kubernetes-preserve-unknown-fields"] and "type" not in user_config
    assert spec["args"]["type"] == "object" and spec["args"]["x-kubernetes-preserve-unknown-fields"]
    env = spec["runtime"]["properties"]["env"]
    assert env["additionalProperties"] == {"type": "string"}
    # traffic.split: a mapping or a list, so kept as given for the validator.
    assert spec["traffic"]["properties"]["split"]["x-kubernetes-preserve-unknown-fields"]


def test_structural_inlines_refs_and_drops_what_a_crd_has_no_room_for() -> None:
    defs = {"s": {"type": "object", "description": "S", "additionalProperties": False,
                  "properties": {"a": {"type": ["integer", "null"], "minimum": 1}},
                  "allOf": [{"not": {"required": ["a"]}}]}}
    node = {"description": "the key", "anyOf": [{"$ref": "#/$defs/s"}, {"type": "null"}]}
    assert structural(node, defs) == {
        "type": "object", "description": "the key", "nullable": True,
        "properties": {"a": {"type": "integer", "minimum": 1, "nullable": True}}}
    assert structural({"enum": ["x", None], "type": ["string", "null"]}, {}) == {
        "type": "string", "enum": ["x"], "nullable": True}
    assert structural({"not": {}}, {}) == {"x-kubernetes-preserve-unknown-fields": True}


def test_the_crd_has_a_status_subresource_and_the_printer_columns() -> None:
    version = crd()["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {"Application": ".status.application", "Status": ".status.phase",
                       "Replicas": ".status.replicas", "Age": ".metadata.creationTimestamp"}
    assert crd()["spec"]["names"]["shortNames"] == ["sfapp"]
