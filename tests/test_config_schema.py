"""The config file's JSON Schema: current, valid, met by every config file in
the repository, and of the same verdict as the validator on good and bad
configs (a hand-written table, and cases made from every key of the tables
both are driven by)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from servefleet._private.configuration.config_fields import TOP
from servefleet._private.configuration.config_file import dump_config, load_config, parse_config
from servefleet._private.configuration.config_schema import SCHEMA_PATH, config_schema, schema_text
from servefleet._private.configuration.field_table import Field, Section
from servefleet._private.configuration.option_checks import OptionError
from servefleet._private.configuration.option_fields import AUTOSCALING, DEPLOYMENT_OPTIONS
from servefleet.v1 import controller_pb2 as api

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "build", ".build", "node_modules", "servefleet.egg-info"}
SCHEMA = jsonschema.Draft202012Validator(config_schema())


def schema_accepts(data: Any) -> bool:
    return SCHEMA.is_valid(data)


def validator_accepts(data: Any) -> bool:
    try:
        parse_config(data, "/", lambda line: None)
    except OptionError:
        return False
    return True


def config_files() -> Iterator[Path]:
    """Every YAML file in the repository with a top-level `applications:`."""
    for path in sorted([*ROOT.rglob("*.yaml"), *ROOT.rglob("*.yml")]):
        if SKIP_DIRS & set(path.relative_to(ROOT).parts):
            continue
        if any(line.startswith("applications:") for line in path.read_text().splitlines()):
            yield path


def test_the_committed_schema_is_current() -> None:
    committed = (ROOT / SCHEMA_PATH).read_text()
    assert committed == schema_text(), (
        f"{SCHEMA_PATH} is stale: run `.venv/bin/servefleet config schema > {SCHEMA_PATH}` "
        "and commit the result")


def test_the_schema_is_draft_2020_12_and_describes_every_key() -> None:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for name, section in [("(top)", schema), *schema["$defs"].items()]:
        assert section["additionalProperties"] is False, name
        for key, spec in section["properties"].items():
            assert spec["description"], f"{name}.{key}"


def test_the_cli_prints_it_and_its_help_shows_an_example() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "servefleet", "config", "schema", *args],
                              capture_output=True, text=True, timeout=60, check=True)

    assert run().stdout == schema_text()
    assert f"servefleet config schema > {SCHEMA_PATH}" in run("--help").stdout


def test_every_config_file_in_the_repository_meets_it_and_names_it() -> None:
    found = list(config_files())
    names = {str(p.relative_to(ROOT)) for p in found}
    assert {"examples/config.yaml", "examples/digits/config.yaml", "examples/llm/config.yaml",
            "deploy/apps.yaml"} <= names
    for path in found:
        errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                  for e in SCHEMA.iter_errors(yaml.safe_load(path.read_text()))]
        assert errors == [], path
        load_config(str(path), lambda line: None)  # and the validator takes it
        first = path.read_text().splitlines()[0]
        prefix = "# yaml-language-server: $schema="
        assert first.startswith(prefix), f"{path}: the first line should name the schema"
        assert (path.parent / first[len(prefix):]).resolve() == ROOT / SCHEMA_PATH, path


APP = "applications:\n  - name: a\n    import_path: m:app\n"
DEP = APP + "    deployments:\n      - name: D\n"

# (config, verdict): True where both must accept, False where both must refuse.
CASES: list[tuple[str, bool]] = [
    (APP, True),
    ("applications: []", True),
    ("", False),  # an empty file: applications is required
    ("- a", False),
    ("http_options: {host: 0.0.0.0, port: 8000, request_timeout_s: 1.5}\n" + APP, True),
    ("http_options: null\ngrpc_options: null\n" + APP, True),
    # Wrong types.
    ("http_options: {port: '8000'}\n" + APP, False),
    ("http_options: {host: null}\n" + APP, False),
    ("applications: {}", False),
    (APP + "    require_token: yes-please\n", False),
    (APP + "    args: [1]\n", False),
    (APP + "    deployments: {}\n", False),
    (APP + "    runtime: {env: {X: 1}}\n", False),
    (APP + "    runtime: {env: {1: x}}\n", False),
    (APP + "    runtime: {excludes: '*.pyc'}\n", False),
    (APP + "    runtime: {placement: {constraints: ''}}\n", False),
    (APP + "    grpc_servicer_functions: [3]\n", False),
    (DEP + "        num_replicas: two\n", False),
    (DEP + "        num_replicas: true\n", False),
    (DEP + "        max_ongoing_requests: null\n", False),
    (DEP + "        health_check_period_s: soon\n", False),
    (DEP + "        user_config: {any: [thing, 1, null]}\n", True),
    (DEP + "        retry_methods: GET\n", False),
    (DEP + "        resources: {num_cpus: 0.5, num_gpus: 1, memory_bytes: 1000}\n", True),
    (DEP + "        resources: {num_cpus: -1}\n", False),
    # Unknown keys, the ones with hints too.
    ("apps: []", False),
    ("host: 0.0.0.0\n" + APP, False),
    (APP + "    env_vars: {A: b}\n", False),
    (DEP + "        replicas: 1\n", False),
    (DEP + "        autoscaling_config: {max: 3}\n", False),
    (APP + "    runtime: {placement: {zones: []}}\n", False),
    (APP + "    traffic: {split: {A: 1}, mirror: {}}\n", False),
    # Out of bounds, and just inside.
    ("http_options: {port: 0}\n" + APP, False),
    ("grpc_options: {port: 65535}\n" + APP, True),
    (DEP + "        num_replicas: 10000\n", True),
    (DEP + "        num_replicas: 10001\n", False),
    (DEP + "        num_replicas: -1\n", False),
    (DEP + "        max_queued_requests: -1\n", True),
    (DEP + "        max_queued_requests: -2\n", False),
    (DEP + "        autoscaling_config: {min_replicas: 0, max_replicas: 0}\n", False),
    (DEP + "        autoscaling_config: {min_replicas: 0, max_replicas: 10000}\n", True),
    # Choices and patterns.
    (DEP + "        num_replicas: auto\n", True),
    (DEP + "        num_replicas: AUTO\n", False),
    (DEP + "        autoscaling_config: {policy: 'm:f'}\n", True),
    (DEP + "        autoscaling_config: {policy: {name: 'm:f'}}\n", True),
    (DEP + "        autoscaling_config: {policy: {nam: 'm:f'}}\n", False),
    (APP + "    traffic: {split: [{deployment: A, weight: 90}, {deployment: B, weight: 10}]}\n",
     True),
    (APP + "    traffic: {split: [{deployment: A}]}\n", False),
    (APP + "    traffic: {split: 5}\n", False),
    (APP + "    traffic: {shadow: {deployment: S, fraction: 0.1}}\n", True),
    (APP + "    traffic: {shadow: {deployment: S}}\n", False),
    (APP + "    route_prefix: null\n", True),
    # Ray Serve's keys: accepted with a warning, or refused as Ray or servefleet would.
    ("proxy_location: EveryNode\ntarget_capacity: 100\nlogging_config: {encoding: JSON}\n"
     + APP, True),
    ("proxy_location: Nowhere\n" + APP, False),
    ("target_capacity: 50\n" + APP, False),
    ("logging_config: {colour: blue}\n" + APP, False),
    ("http_options: {keep_alive_timeout_s: 5, root_path: '', ssl_keyfile: k, "
     "ssl_certfile: c, location: HeadOnly}\n" + APP, True),
    ("http_options: {root_path: /api}\n" + APP, False),
    ("grpc_options: {request_timeout_s: 5}\n" + APP, True),
    (APP + "    runtime_env: {working_dir: ., env_vars: {A: b}, excludes: [x], "
     "image_uri: img, config: {setup_timeout_seconds: 60}}\n", True),
    (APP + "    runtime_env: {pip: [torch]}\n", False),
    (APP + "    runtime_env: {working_dir: 's3://bucket/code.zip'}\n", False),
    (APP + "    runtime_env: {nodes: 3}\n", False),
    (APP + "    runtime: {working_dir: .}\n    runtime_env: {working_dir: .}\n", False),
    (APP + "    runtime: null\n    runtime_env: {working_dir: .}\n", True),
    (DEP + "        max_concurrent_queries: 4\n", True),
    (DEP + "        max_concurrent_queries: 4\n        max_ongoing_requests: 4\n", False),
    (DEP + "        max_concurrent_queries: 0\n", False),
    (DEP + "        route_prefix: /a\n", True),
    (DEP + "        route_prefix: a\n", False),
    (DEP + "        route_prefix: /a/\n", False),
    (DEP + "        route_prefix: /{a}\n", False),
    (DEP + "        ray_actor_options: {num_cpus: 0.5, num_gpus: 1, memory: 100, "
     "resources: {custom: 1}, accelerator_type: A100, runtime_env: {env_vars: {A: b}}}\n",
     True),
    (DEP + "        ray_actor_options: {num_cpus: -0.5}\n", False),
    (DEP + "        ray_actor_options: {num_gpus: 1}\n        resources: {num_cpus: 1}\n", False),
    (DEP + "        ray_actor_options: {runtime_env: {}}\n        runtime: {}\n", False),
    (DEP + "        ray_actor_options: {runtime_env: null}\n        runtime: {}\n", True),
    (DEP + "        autoscaling_config: {target_num_ongoing_requests_per_replica: 2, "
     "smoothing_factor: 0.5, prometheus_metrics: [m]}\n", True),
    (DEP + "        autoscaling_config: {target_num_ongoing_requests_per_replica: 2, "
     "target_ongoing_requests: 2}\n", False),
    (DEP + "        autoscaling_config: {upscale_smoothing_factor: null, upscaling_factor: 1}\n",
     True),
    (DEP + "        placement_group_bundles: [{CPU: 1}]\n"
     "        placement_group_strategy: SPREAD\n", True),
    (DEP + "        placement_group_strategy: SPREAD\n", False),
    (DEP + "        placement_group_bundles: [{CPU: 1}]\n"
     "        placement_group_strategy: ROUND\n", False),
    (DEP + "        placement_group_bundles: []\n", False),
    (DEP + "        placement_group_bundles: [{CPU: 1}]\n        max_replicas_per_node: 2\n",
     False),
    (DEP + "        max_replicas_per_node: 101\n", False),
    (DEP + "        max_constructor_retry_count: 3\n        logging_config: {log_level: INFO}\n",
     True),
    (DEP + "        request_router_config: {request_router_class: 'm:Router', "
     "request_router_kwargs: {k: 1}, initial_backoff_s: 1}\n", True),
    (DEP + "        request_router_config: {request_router_class: 5}\n", False),
    (DEP + "        request_router_config: {request_router_kwargs: [1]}\n", False),
]


@pytest.mark.parametrize(("text", "verdict"), CASES)
def test_the_schema_and_the_validator_agree(text: str, verdict: bool) -> None:
    data = yaml.safe_load(textwrap.dedent(text))
    assert (schema_accepts(data), validator_accepts(data)) == (verdict, verdict)


# Values for the required keys, so that a case differs from a good config in one key only.
REQUIRED = {"applications": [], "import_path": "m:app", "name": "D", "deployment": "D",
            "weight": 1, "fraction": 0.5}
# Keys whose rule is more than their kind: a good and a bad value.
SPECIAL: dict[str, tuple[Any, Any]] = {
    "deployment.route_prefix": ("/a", "a/"),
    "deployment.placement_group_bundles": ([{"CPU": 1}], [{"CPU": -1}]),
    "runtime_env.working_dir": (".", "s3://bucket/code"),
    "autoscaling_config.policy": ("m:f", {"nam": "m:f"})}
Wrap = Callable[[dict[str, Any]], Any]


def minimal(section: Section) -> dict[str, Any]:
    return {f.name: REQUIRED[f.name] for f in section.fields if f.required}


def places() -> Iterator[tuple[str, Section, Wrap]]:
    """Every place a section takes in a config: its path, and the config
    around a mapping put there."""
    def walk(section: Section, path: str, wrap: Wrap) -> Iterator[tuple[str, Section, Wrap]]:
        yield path, section, wrap
        for f in section.fields:
            if f.section is not None:
                many = f.kind != "section"  # a list of them: section_list, traffic.split

                def inner(m: dict[str, Any], f: Field = f, wrap: Wrap = wrap,
                          section: Section = section, many: bool = many) -> Any:
                    return wrap({**minimal(section), f.name: [m] if many else m})

                yield from walk(f.section, f"{path}.{f.name}", inner)

    yield from walk(TOP, "(top)", lambda m: m)


def values(section: Section, spec: Field) -> Iterator[tuple[Any, bool]]:
    """Values for the key, each with whether it is good."""
    special = SPECIAL.get(f"{section.name}.{spec.name}")
    if special is not None:
        yield special[0], True
        yield special[1], False
        yield None, spec.nullable
        return
    if spec.choices:
        yield spec.choices[0], True
        yield ("Nowhere" if spec.kind == "str" else 50), False
    elif spec.kind == "int":
        low, high = spec.bounds or (0, 1)
        yield from ((low, True), (high, True), (low - 1, False), (high + 1, False),
                    (1.5, False), (True, False))
    elif spec.kind in ("number", "non_negative"):
        yield from ((0, True), (2.5, True), ("x", False), (False, False))
        if spec.kind == "non_negative":
            yield -1, False
    elif spec.kind == "bool":
        yield from ((True, True), ("true", False))
    elif spec.kind == "str":
        yield from (("m:x", True), (5, False))
    elif spec.kind == "str_list":
        yield from ((["a"], True), ("a", False), ([5], False))
    elif spec.kind == "mapping":
        yield from (({}, True), ("x", False), ({5: "x"}, False))
        if spec.values is not None:
            yield {"k": "x" if spec.values != "str" else 5}, False
    elif spec.kind == "section":
        assert spec.section is not None
        yield from ((minimal(spec.section), True), ("x", False), ([], False))
    elif spec.kind == "section_list":
        yield from (([], True), ("x", False), ({}, False))
    elif spec.kind == "refused":
        yield ["anything"], False
    if spec.kind not in ("json", "any", "refused"):
        yield None, spec.nullable
    else:
        yield {"a": [1, None]}, spec.kind != "refused"


def generated_cases() -> Iterator[Any]:
    for path, section, wrap in places():
        yield pytest.param(wrap({**minimal(section), "no_such_key": 1}), False,
                           id=f"{path}.no_such_key")
        needs = dict(section.needs)
        for spec in section.fields:
            for i, (value, good) in enumerate(values(section, spec)):
                mapping = {**minimal(section), spec.name: value}
                if spec.name in needs:  # what it needs, given
                    other = needs[spec.name]
                    mapping[other] = next(v for v, ok in values(section, section[other]) if ok)
                yield pytest.param(wrap(mapping), good, id=f"{path}.{spec.name}-{i}")


@pytest.mark.parametrize(("data", "verdict"), list(generated_cases()))
def test_they_agree_on_every_key_of_the_tables(data: Any, verdict: bool) -> None:
    assert (schema_accepts(data), validator_accepts(data)) == (verdict, verdict), data


def test_draft_07_validators_give_the_same_verdicts() -> None:
    """Editors' yaml-language-server validates as draft-07 does: the schema
    uses no keyword whose absence there would change a verdict."""
    draft_07 = jsonschema.Draft7Validator(config_schema())
    cases = [(yaml.safe_load(textwrap.dedent(text)), verdict) for text, verdict in CASES]
    cases += [tuple(p.values) for p in generated_cases()]
    assert [data for data, verdict in cases if draft_07.is_valid(data) != verdict] == []


def test_the_defaults_in_the_help_are_the_controllers() -> None:
    from servefleet.controller.goals import spec

    for section, defaults in ((DEPLOYMENT_OPTIONS, spec._REPLICA_DEFAULTS),
                              (AUTOSCALING, spec._AUTOSCALING_DEFAULTS)):
        for name, value in defaults.items():
            said = re.search(r"Default (-?[0-9.]+)\.", section[name].help)
            assert said is None or float(said.group(1)) == value, (section.name, name)


def test_every_section_has_one_name() -> None:
    seen: dict[str, Section] = {}
    for _, section, _ in places():
        assert seen.setdefault(section.name, section) is section, section.name


def test_what_servefleet_config_writes_meets_it(tmp_path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(textwrap.dedent(DEP) + "        num_replicas: 2\n"
                    "        user_config: {a: 1}\n"
                    "        autoscaling_config: {max_replicas: 3, policy: 'm:f'}\n"
                    "        resources: {num_gpus: 1}\n"
                    "        runtime: {env: {A: b}, placement: {spread: [zone]}}\n"
                    "    traffic: {split: {D: 1}, shadow: {deployment: S, fraction: 0.5}}\n"
                    "    runtime: {working_dir: .}\n")
    request = load_config(str(path))
    reply = api.ListApplicationsResponse(http_options=request.http_options)
    for spec in request.applications:
        reply.applications.add(spec=spec)
    data = yaml.safe_load(dump_config(reply))
    assert list(SCHEMA.iter_errors(data)) == []
